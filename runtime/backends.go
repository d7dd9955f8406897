package runtime

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Opener opens device number ordinal of a backend; threads is a hint for
// host backends (0: all cores).
type Opener func(ordinal, threads int) (Device, error)

var (
	backendsMu sync.Mutex
	backends   = map[string]Opener{}
)

// RegisterBackend makes a backend reachable by name through OpenDevice.
// Backends register themselves in an init function, so a program offers
// the GPU backend by importing runtime/cuda (behind the cuda build tag).
func RegisterBackend(name string, open Opener) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	backends[name] = open
}

// OpenDevice opens a device named like torch.device: "cpu", "cuda" or
// "cuda:N".
func OpenDevice(spec string, threads int) (Device, error) {
	name, ord := spec, 0
	if n, o, ok := strings.Cut(spec, ":"); ok {
		i, err := strconv.Atoi(o)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("device %q: bad ordinal %q", spec, o)
		}
		name, ord = n, i
	}
	backendsMu.Lock()
	open, ok := backends[name]
	var have []string
	for n := range backends {
		have = append(have, n)
	}
	backendsMu.Unlock()
	if !ok {
		sort.Strings(have)
		hint := ""
		if name == "cuda" {
			hint = " (build with -tags cuda for the GPU backend)"
		}
		return nil, fmt.Errorf("device %q: no backend %q in this binary; have %s%s", spec, name, strings.Join(have, ", "), hint)
	}
	return open(ord, threads)
}
