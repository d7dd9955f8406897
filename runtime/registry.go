package runtime

import (
	"fmt"
	"sort"
	"sync"
)

// Generated is what every generated model package offers beside its typed
// API: its plan and its kernels. Each package registers itself in its
// init (Register), as database/sql's drivers and image's formats do, so
// that tools, tests and benchmarks that work on any model (cmd/train, the
// GPU suite, the GPU-forms tests) find the packages linked into the binary
// by name instead of keeping lists of them.
type Generated struct {
	Path   string // the package's import path
	Name   string // the package's name: "gpt", "mlp_unfused"
	Model  string // the model's name in the DSL
	Source string // the DSL file, relative to its module
	Plan   *Plan
	// Module returns the kernels in every form a backend may load.
	Module func() *Module
}

// Fused reports whether the package was generated with fusion (ngen build
// without -fuse=none).
func (g *Generated) Fused() bool { return g.Plan.Fused }

// NewSession opens an instance of the model on dev, as the package's typed
// New does (which wraps the same session in its typed methods).
func (g *Generated) NewSession(dev Device, opts SessionOptions) (*Session, error) {
	return NewSession(dev, g.Plan, g.Module(), opts)
}

var registry struct {
	sync.Mutex
	byPath map[string]*Generated
}

// Register records a generated package, by its import path. Generated
// packages call it from init; registering one path twice panics.
func Register(g Generated) {
	if g.Path == "" || g.Name == "" || g.Plan == nil || g.Module == nil {
		panic(fmt.Sprintf("runtime.Register: package %q: path, name, plan and module are required", g.Path))
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byPath == nil {
		registry.byPath = map[string]*Generated{}
	}
	if _, dup := registry.byPath[g.Path]; dup {
		panic(fmt.Sprintf("runtime.Register: package %s registered twice", g.Path))
	}
	registry.byPath[g.Path] = &g
}

// Registered returns the generated package with that import path, or with
// that package name when exactly one linked package has it.
func Registered(name string) (*Generated, error) {
	registry.Lock()
	defer registry.Unlock()
	if g, ok := registry.byPath[name]; ok {
		return g, nil
	}
	var found []*Generated
	for _, g := range registry.byPath {
		if g.Name == name {
			found = append(found, g)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return nil, fmt.Errorf("no generated model package %q in this binary (linked: %v)", name, registeredNames())
	}
	var paths []string
	for _, g := range found {
		paths = append(paths, g.Path)
	}
	sort.Strings(paths)
	return nil, fmt.Errorf("%d generated model packages named %q in this binary: name one by import path (%v)", len(found), name, paths)
}

// RegisteredAll returns every registered package, sorted by import path.
func RegisteredAll() []*Generated {
	registry.Lock()
	defer registry.Unlock()
	var out []*Generated
	for _, g := range registry.byPath {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func registeredNames() []string {
	var out []string
	for _, g := range registry.byPath {
		out = append(out, g.Name)
	}
	sort.Strings(out)
	return out
}
