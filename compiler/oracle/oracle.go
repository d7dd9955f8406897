// Package oracle runs single ops through PyTorch so that tests can check
// ngen's kernels and vector-Jacobian products against an independent
// implementation, as micrograd, tinygrad and llm.c do.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime. The oracle sits
// outside it: tests build Cases from IR ops, run the generated kernels on
// the CPU backend, and compare with Run's Results. The work is done by
// testdata/oracle/torch_ops.py under Debian's /usr/bin/python3 with
// python3-torch; the protocol is in testdata/oracle/README.md.
package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
)

// Python is the interpreter that has python3-torch. A python3 found on PATH
// (a virtualenv, say) may not, or may have a different torch.
const Python = "/usr/bin/python3"

// Tensor is an op input or result. DType is "f32", "f64" or "i32"; empty
// means the Case's DType. Data is row-major; a scalar has Shape [] and one
// value. f32 results are exact: each float64 is a widened float32.
type Tensor struct {
	Shape []int
	DType string
	Data  []float64
}

// Case is one op application. Attrs use the oracle's names: f, axes,
// keepdim, transa, transb, shape (see the README). GradOutput, when set,
// asks for the gradients d(sum(output*GradOutput))/d(input).
type Case struct {
	Op         string
	Attrs      map[string]any
	DType      string
	Inputs     []Tensor
	GradOutput *Tensor
}

// Result is the oracle's answer to one Case. Grads has one entry per input:
// nil for integer inputs and when the Case had no GradOutput.
type Result struct {
	Output Tensor
	Grads  []*Tensor
}

// setupHint is what to do when the oracle cannot run.
const setupHint = "install python3-torch with bash scripts/setup.sh (the README's test command runs it), then rerun the tests"

var available = sync.OnceValue(func() error {
	out, err := exec.Command(Python, "-c", "import torch").CombinedOutput()
	if err != nil {
		return fmt.Errorf("oracle: %s cannot import torch (%v: %s); %s", Python, err, bytes.TrimSpace(out), setupHint)
	}
	return nil
})

// Available reports whether the oracle can run. Tests should skip, not fail,
// when it returns an error, so that machines without torch still pass.
func Available() error { return available() }

// Script is the path of torch_ops.py, found from this source file so that
// it works from any test's working directory.
func Script() string { return ScriptPath("torch_ops.py") }

// ScriptPath is the path of the script name in testdata/oracle.
func ScriptPath(name string) string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	return filepath.Join(root, "testdata", "oracle", name)
}

// RunScript runs testdata/oracle/name under Python with req, encoded as
// JSON, on its standard input, and decodes its standard output into res.
// Each script's docstring gives its request and result; Run is
// torch_ops.py's. An error carries the script's standard error.
//
// The script runs in a long-lived python (testdata/oracle/serve.py), one
// per concurrent caller, which imports torch once per test process instead
// of once per request; NGEN_ORACLE_SERVER=0 starts a python per request.
func RunScript(name string, req, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("oracle: %s: encode request: %w", name, err)
	}
	var out []byte
	if os.Getenv("NGEN_ORACLE_SERVER") == "0" {
		out, err = runOnce(name, body)
	} else {
		out, err = servers.run(name, body)
	}
	if err != nil {
		return fmt.Errorf("oracle: %s: %v", name, err)
	}
	if err := json.Unmarshal(out, res); err != nil {
		return fmt.Errorf("oracle: %s: decode result: %w", name, err)
	}
	return nil
}

// runOnce runs the script in a python of its own.
func runOnce(name string, body []byte) ([]byte, error) {
	cmd := exec.Command(Python, ScriptPath(name))
	cmd.Stdin = bytes.NewReader(body)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v\n%s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// servers are the idle serve.py processes; a caller takes one or starts
// one, and gives it back after its request.
var servers serverPool

type serverPool struct {
	mu   sync.Mutex
	idle []*server
}

type server struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
}

func (p *serverPool) run(name string, body []byte) ([]byte, error) {
	p.mu.Lock()
	var s *server
	if n := len(p.idle); n > 0 {
		s, p.idle = p.idle[n-1], p.idle[:n-1]
	}
	p.mu.Unlock()
	if s == nil {
		var err error
		if s, err = startServer(); err != nil {
			return nil, err
		}
	}
	out, scriptErr, err := s.request(name, body)
	if err != nil {
		// The process is gone or out of step: drop it.
		s.in.Close()
		_ = s.cmd.Wait()
		return nil, fmt.Errorf("%v\n%s", err, bytes.TrimSpace(s.stderr.Bytes()))
	}
	p.mu.Lock()
	p.idle = append(p.idle, s)
	p.mu.Unlock()
	return out, scriptErr
}

func startServer() (*server, error) {
	cmd := exec.Command(Python, ScriptPath("serve.py"))
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, in: in, out: bufio.NewReader(out), stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// request sends one request; scriptErr is the script's failure, err the
// server's.
func (s *server) request(name string, body []byte) (out []byte, scriptErr, err error) {
	head, _ := json.Marshal(map[string]any{"script": name, "bytes": len(body)})
	if _, err := s.in.Write(append(head, '\n')); err != nil {
		return nil, nil, err
	}
	if _, err := s.in.Write(body); err != nil {
		return nil, nil, err
	}
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		return nil, nil, fmt.Errorf("serve.py: %v", err)
	}
	var resp struct {
		OK    bool   `json:"ok"`
		Bytes int    `json:"bytes"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(line, &resp); err != nil {
		return nil, nil, fmt.Errorf("serve.py: bad response header %q: %v", line, err)
	}
	out = make([]byte, resp.Bytes)
	if _, err := io.ReadFull(s.out, out); err != nil {
		return nil, nil, fmt.Errorf("serve.py: %v", err)
	}
	if !resp.OK {
		return nil, errors.New(resp.Error), nil
	}
	return out, nil, nil
}

// Mismatch describes where got is not within atol + rtol·|want| of want,
// elementwise: how many values are off and the worst one, relative to its
// tolerance (so a failure tells one stray element from a wrong tensor).
// It returns "" when every value is within.
func Mismatch(got, want []float64, rtol, atol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, torch %d", len(got), len(want))
	}
	bad, worst, at := 0, 0.0, 0
	for i := range want {
		tol := atol + rtol*math.Abs(want[i])
		if d := math.Abs(got[i] - want[i]); !(d <= tol) {
			bad++
			if e := d / tol; !(e <= worst) {
				worst, at = e, i
			}
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d values off; worst at [%d]: got %.9g, torch %.9g (%.3g× the tolerance)",
		bad, len(want), at, got[at], want[at], worst)
}

// Run sends all cases to one python process and returns one Result per
// case, in order. Batching matters: starting python and importing torch
// costs about a second, a case a millisecond.
func Run(cases []Case) ([]Result, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	req := make([]wireCase, len(cases))
	for i, c := range cases {
		req[i] = wireCase{Op: c.Op, Attrs: c.Attrs, DType: c.DType, Inputs: make([]wireTensor, len(c.Inputs))}
		for j, t := range c.Inputs {
			req[i].Inputs[j] = toWire(t)
		}
		if c.GradOutput != nil {
			g := toWire(*c.GradOutput)
			req[i].GradOutput = &g
		}
	}
	var resp []wireResult
	if err := RunScript("torch_ops.py", req, &resp); err != nil {
		return nil, err
	}
	if len(resp) != len(cases) {
		return nil, fmt.Errorf("oracle: %d results for %d cases", len(resp), len(cases))
	}
	results := make([]Result, len(resp))
	for i, r := range resp {
		results[i].Output = fromWire(r.Output)
		results[i].Grads = make([]*Tensor, len(r.Grads))
		for j, g := range r.Grads {
			if g != nil {
				t := fromWire(*g)
				results[i].Grads[j] = &t
			}
		}
	}
	return results, nil
}

// The wire types carry the JSON protocol. Shapes must encode as [] rather
// than null for scalars, and non-finite numbers travel as strings.
type wireCase struct {
	Op         string         `json:"op"`
	Attrs      map[string]any `json:"attrs,omitempty"`
	DType      string         `json:"dtype,omitempty"`
	Inputs     []wireTensor   `json:"inputs"`
	GradOutput *wireTensor    `json:"grad_output,omitempty"`
}

type wireTensor struct {
	Shape []int    `json:"shape"`
	DType string   `json:"dtype,omitempty"`
	Data  []number `json:"data"`
}

type wireResult struct {
	Output wireTensor    `json:"output"`
	Grads  []*wireTensor `json:"grads"`
}

func toWire(t Tensor) wireTensor {
	w := wireTensor{Shape: t.Shape, DType: t.DType, Data: make([]number, len(t.Data))}
	if w.Shape == nil {
		w.Shape = []int{}
	}
	for i, v := range t.Data {
		w.Data[i] = number(v)
	}
	return w
}

func fromWire(w wireTensor) Tensor {
	t := Tensor{Shape: w.Shape, DType: w.DType, Data: make([]float64, len(w.Data))}
	if t.Shape == nil {
		t.Shape = []int{}
	}
	for i, v := range w.Data {
		t.Data[i] = float64(v)
	}
	return t
}

// number is a float64 whose JSON form is a number when finite and one of
// the strings "NaN", "Infinity", "-Infinity" otherwise, the spelling that
// torch_ops.py reads and writes.
type number float64

func (n number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"Infinity"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Infinity"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func (n *number) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch s {
		case "NaN":
			*n = number(math.NaN())
		case "Infinity":
			*n = number(math.Inf(1))
		case "-Infinity":
			*n = number(math.Inf(-1))
		default:
			return errors.New("oracle: number string " + strconv.Quote(s) + " is not NaN, Infinity or -Infinity")
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*n = number(f)
	return err
}
