package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ngen-ml/ngen/runtime/data"
	"github.com/ngen-ml/ngen/runtime/dist"
)

var (
	distMode    = flag.String("dist", "", "data-parallel training across processes: mpi (start under mpirun, one process per device; -batch is per process)")
	distTimeout = flag.Duration("dist-timeout", dist.DefaultTimeout, "with -dist: how long any collective may wait for the other ranks before the job is aborted")
)

// group is the set of processes training together (-dist mpi), or this
// process alone (nil comm): every method works in both cases.
type group struct {
	comm *dist.Comm
}

// joinGroup initialises MPI under -dist mpi.
func joinGroup() (*group, error) {
	switch *distMode {
	case "":
		return &group{}, nil
	case "mpi":
		c, err := dist.Init(dist.Options{Timeout: *distTimeout})
		if err != nil {
			return nil, err
		}
		return &group{comm: c}, nil
	}
	return nil, fmt.Errorf("-dist %q: want mpi", *distMode)
}

// lead is true on the process that prints and writes checkpoints: rank 0.
func (g *group) lead() bool { return g.comm == nil || g.comm.Rank() == 0 }

// size is the number of processes.
func (g *group) size() int {
	if g.comm == nil {
		return 1
	}
	return g.comm.Size()
}

// device gives each rank its own GPU: -device cuda becomes cuda:N with N
// the rank's local rank on its host (OMPI_COMM_WORLD_LOCAL_RANK).
func (g *group) device(name string) (string, error) {
	if g.comm == nil || name != "cuda" {
		return name, nil
	}
	l, err := g.comm.LocalRank()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("cuda:%d", l), nil
}

// attach makes m a replica: rank 0's weights everywhere, gradients
// averaged before each update.
func (g *group) attach(m model) error {
	if g.comm == nil {
		return nil
	}
	return m.Session().SetCommunicator(g.comm)
}

// shard makes the loader read this rank's part of each global batch.
func (g *group) shard(l *data.Loader) error {
	if g.comm != nil {
		return l.Shard(g.comm.Rank(), g.comm.Size())
	}
	return nil
}

// sum adds vals over the ranks, in place.
func (g *group) sum(vals []float64) error {
	if g.comm == nil {
		return nil
	}
	return g.comm.AllreduceF64(vals)
}

// accuracy evaluates the rank's contiguous share of the set and sums the
// counts over the ranks.
func (g *group) accuracy(m model, ds *data.Dataset, batch int) (float64, error) {
	lo, hi := 0, ds.N
	if g.comm != nil {
		r, n := g.comm.Rank(), g.comm.Size()
		lo, hi = ds.N*r/n, ds.N*(r+1)/n
	}
	f := ds.Features
	part := &data.Dataset{X: ds.X[lo*f : hi*f], Y: ds.Y[lo:hi], N: hi - lo, Features: f}
	correct := 0
	if part.N > 0 {
		var err error
		if correct, err = countCorrect(m, part, batch); err != nil {
			return 0, err
		}
	}
	c := []float64{float64(correct)}
	if err := g.sum(c); err != nil {
		return 0, err
	}
	return c[0] / float64(ds.N), nil
}

// describe says how the run is split, for the first line of output.
func (g *group) describe(batch int) string {
	if g.comm == nil {
		return ""
	}
	return fmt.Sprintf(" ×%d processes (global batch %d, all-reduce through %s)", g.size(), batch*g.size(), g.path())
}

func (g *group) path() string {
	if g.comm.CUDAAware() {
		return "CUDA-aware MPI on GPU memory"
	}
	return "host memory"
}

// finish ends the run: on error every rank of the job is aborted (the
// others would wait in their next collective until -dist-timeout), else
// MPI is finalised.
func (g *group) finish(err error) {
	if g.comm == nil {
		if err != nil {
			fmt.Fprintln(os.Stderr, "train:", err)
			os.Exit(1)
		}
		return
	}
	if err != nil {
		g.comm.Abort(err)
	}
	if err := g.comm.Finalize(); err != nil {
		fmt.Fprintf(os.Stderr, "train: rank %d: %v\n", g.comm.Rank(), err)
		os.Exit(1)
	}
}

// checkDistFlags refuses what a data-parallel run cannot do.
func checkDistFlags(torch bool, batch string) error {
	if *distMode == "" {
		return nil
	}
	if torch {
		return fmt.Errorf("-torch runs one process: drop it with -dist")
	}
	if strings.EqualFold(batch, "auto") {
		return fmt.Errorf("-batch auto with -dist: give the per-process batch")
	}
	return nil
}
