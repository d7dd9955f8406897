package main

import (
	"io"
	"sort"
	"strings"

	"github.com/ngen-ml/ngen/generated/convnet"
	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
)

// model is what every generated classifier offers the training loop.
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

var models = map[string]func(dev runtime.Device, batch int, seed uint64) (model, error){
	"mlp": func(dev runtime.Device, batch int, seed uint64) (model, error) {
		return mlp.New(dev, mlp.Options{Batch: batch, Seed: seed})
	},
	"convnet": func(dev runtime.Device, batch int, seed uint64) (model, error) {
		return convnet.New(dev, convnet.Options{Batch: batch, Seed: seed})
	},
	"convnet_bn": func(dev runtime.Device, batch int, seed uint64) (model, error) {
		return convnet_bn.New(dev, convnet_bn.Options{Batch: batch, Seed: seed})
	},
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
		names = append(names, n)
	}
	for n := range seqTasks {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
