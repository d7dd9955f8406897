package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	_ "github.com/ngen-ml/ngen/generated/fused" // every fused model, registered
	"github.com/ngen-ml/ngen/runtime"
)

// model is what the image-classifier training loop needs of a model.
type model interface {
	Step(x []float32, y []int32) (float32, error)
	Predict(x []float32) ([]float32, error)
	Train()
	Eval()
	Save(w io.Writer) error
	Load(r io.Reader) error
	Close() error
	Session() *runtime.Session
}

// models are the registered packages (generated/fused links every fused
// model) that train on Fashion-MNIST: a model whose step takes one f32
// input of 784 values a row (28×28 images, flat or not) and one i32 label
// input of 10 classes, and predicts from the images alone. Adding such a
// model to generated/ adds it here; nothing lists them.
var models = imageClassifiers()

func imageClassifiers() map[string]func(dev runtime.Device, batch int, seed uint64) (model, error) {
	out := map[string]func(runtime.Device, int, uint64) (model, error){}
	for _, g := range runtime.RegisteredAll() {
		addImageClassifier(out, g)
	}
	return out
}

// addImageClassifier adds g to out if it is a Fashion-MNIST classifier,
// and a mixed-precision package to ampBuilds under its model's name.
func addImageClassifier(out map[string]func(runtime.Device, int, uint64) (model, error), g *runtime.Generated) bool {
	x, y, ok := imageInputs(g)
	if !ok {
		return false
	}
	if dt := halfType(g.Plan); dt != runtime.F32 {
		if ampBuilds[g.Model] == nil {
			ampBuilds[g.Model] = map[string]string{}
		}
		ampBuilds[g.Model][ampFlagOf(dt)] = g.Name
	}
	out[g.Name] = func(dev runtime.Device, batch int, seed uint64) (model, error) {
		m, err := g.New(dev, runtime.SessionOptions{MaxBatch: batch, Seed: seed})
		if err != nil {
			return nil, err
		}
		return imageModel{m, x, y}, nil
	}
	return true
}

// imageInputs names a Fashion-MNIST classifier's image and label inputs.
func imageInputs(g *runtime.Generated) (x, y string, ok bool) {
	var step, predict *runtime.Func
	for i := range g.Plan.Funcs {
		switch f := &g.Plan.Funcs[i]; f.Name {
		case "step":
			step = f
		case "predict":
			predict = f
		}
	}
	if step == nil || predict == nil || len(step.Inputs) != 2 || len(predict.Inputs) != 1 {
		return "", "", false
	}
	for _, in := range step.Inputs {
		b := g.Plan.Buffers[in.Buf]
		rowOfB := len(b.Elems.Syms) == 1 && b.Elems.Syms[0] == "B"
		switch {
		case b.DType == runtime.F32 && rowOfB && b.Elems.Mul == 28*28:
			x = in.Name
		case b.DType == runtime.I32 && rowOfB && b.Elems.Mul == 1 && b.Bound == 10:
			y = in.Name
		}
	}
	return x, y, x != "" && y != "" && predict.Inputs[0].Name == x
}

// imageModel drives a registered classifier by its inputs' names.
type imageModel struct {
	*runtime.Model
	x, y string
}

func (m imageModel) Step(x []float32, y []int32) (float32, error) {
	loss, err := m.Model.Step(runtime.Inputs{m.x: x, m.y: y})
	return float32(loss), err
}

func (m imageModel) Predict(x []float32) ([]float32, error) {
	return logits(m.Model, runtime.Inputs{m.x: x})
}

// logits runs a registered model's Predict, whose output cmd/train reads
// as f32 logits.
func logits(m *runtime.Model, in runtime.Inputs) ([]float32, error) {
	out, err := m.Predict(in)
	if err != nil {
		return nil, err
	}
	l, ok := out.([]float32)
	if !ok {
		return nil, fmt.Errorf("%s: predicts %T, want f32 logits", m.Generated().Name, out)
	}
	return l, nil
}

// seqNames are the sequence models' names, sorted.
func seqNames() []string {
	var names []string
	for n := range seqTasks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func modelNames() string {
	var names []string
	for n := range models {
		if _, _, amp := ampOf(n); !amp { // -model M -amp T trains them
			names = append(names, n)
		}
	}
	for n := range seqTasks {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
