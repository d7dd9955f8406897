package ir

import (
	"encoding/json"
	"fmt"
)

// The JSON form carries a declared Model from the DSL evaluation process to
// the compiler.

type jsonValue struct {
	ID    int    `json:"id"`
	Op    string `json:"op"`
	Args  []int  `json:"args,omitempty"`
	Shape Shape  `json:"shape"`
	DType string `json:"dtype"`
	Attrs Attrs  `json:"attrs"`
	Pos   Pos    `json:"pos"`
	Role  Role   `json:"role,omitempty"`
	Name  string `json:"name,omitempty"`
	Ckpt  int    `json:"checkpoint,omitempty"`
}

type jsonModel struct {
	Name      string      `json:"name"`
	Source    string      `json:"source"`
	Pos       Pos         `json:"pos"`
	Values    []jsonValue `json:"values"`
	Loss      int         `json:"loss"`
	Output    int         `json:"output"`
	Optimizer *Optimizer  `json:"optimizer,omitempty"`
	Precision *Precision  `json:"precision,omitempty"`
	Updates   [][2]int    `json:"updates,omitempty"` // (state, new value) IDs
	// Outputs are the forward function's further named results (an RNN's
	// final states), read back after predict.
	Outputs map[string]int `json:"outputs,omitempty"`
}

// MarshalJSON encodes the model.
func (m *Model) MarshalJSON() ([]byte, error) {
	m.Forward.Renumber()
	jm := jsonModel{Name: m.Name, Source: m.Source, Pos: m.Pos, Loss: -1, Output: -1, Optimizer: m.Optimizer, Precision: m.Precision}
	for _, v := range m.Forward.Values {
		jv := jsonValue{ID: v.ID, Op: v.Op, Shape: v.Shape, DType: v.DType.String(), Attrs: v.Attrs, Pos: v.Pos, Role: v.Role, Name: v.Name, Ckpt: v.Checkpoint}
		for _, a := range v.Args {
			jv.Args = append(jv.Args, a.ID)
		}
		jm.Values = append(jm.Values, jv)
	}
	if m.Loss != nil {
		jm.Loss = m.Loss.ID
	}
	if m.Output != nil {
		jm.Output = m.Output.ID
	}
	for _, u := range m.Forward.Updates {
		jm.Updates = append(jm.Updates, [2]int{u.State.ID, u.New.ID})
	}
	for name, v := range m.Forward.Outputs {
		if jm.Outputs == nil {
			jm.Outputs = map[string]int{}
		}
		jm.Outputs[name] = v.ID
	}
	return json.Marshal(jm)
}

// UnmarshalJSON decodes a model, checking that every argument refers to an
// earlier value.
func (m *Model) UnmarshalJSON(data []byte) error {
	var jm jsonModel
	if err := json.Unmarshal(data, &jm); err != nil {
		return err
	}
	f := NewFunc("forward")
	byID := map[int]*Value{}
	for _, jv := range jm.Values {
		dt, err := ParseDType(jv.DType)
		if err != nil {
			return err
		}
		var args []*Value
		for _, id := range jv.Args {
			a, ok := byID[id]
			if !ok {
				return fmt.Errorf("value %d uses undefined value %d", jv.ID, id)
			}
			args = append(args, a)
		}
		v := f.NewValue(jv.Op, dt, jv.Shape, jv.Pos, args...)
		v.Attrs, v.Role, v.Name, v.Checkpoint = jv.Attrs, jv.Role, jv.Name, jv.Ckpt
		byID[jv.ID] = v
	}
	*m = Model{Name: jm.Name, Source: jm.Source, Pos: jm.Pos, Forward: f, Optimizer: jm.Optimizer, Precision: jm.Precision}
	m.Loss = byID[jm.Loss]
	m.Output = byID[jm.Output]
	for _, u := range jm.Updates {
		st, nv := byID[u[0]], byID[u[1]]
		if st == nil || nv == nil || st.Role != State {
			return fmt.Errorf("update %v: want the IDs of a state value and of its new value", u)
		}
		f.Updates = append(f.Updates, Update{State: st, New: nv})
	}
	for name, id := range jm.Outputs {
		v, ok := byID[id]
		if !ok {
			return fmt.Errorf("output %q: undefined value %d", name, id)
		}
		f.Outputs[name] = v
	}
	return nil
}
