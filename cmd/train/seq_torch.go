package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/ngen-ml/ngen/runtime/data"
)

// compareSeq runs the PyTorch peer of a sequence model on the very
// sequences ngen trained on and prints its epochs beside ours.
func compareSeq(ours []epochResult, task seqTask, script, name string, o seqOptions) error {
	p, err := startSeqPeer(task, script, name, o)
	if err != nil {
		return err
	}
	return p.compare(ours)
}

// seqPeer is a running PyTorch peer (bench/torch_train.py --seqdata). The
// sequences are written to a temporary file (writeSeqSets) rather than
// loaded again in Python, so the two sides cannot disagree about the data
// or its split.
type seqPeer struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	file   string
	script string
	sets   *seqSets
	steps  int
}

// startSeqPeer writes the splits and starts the peer; it does not wait.
func startSeqPeer(task seqTask, script, name string, o seqOptions) (*seqPeer, error) {
	dir := o.dir
	if dir == "" {
		dir = task.dataDir
	}
	sets, err := task.load(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "ngen-seq-*.bin")
	if err != nil {
		return nil, err
	}
	if err := writeSeqSets(f, sets); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return nil, err
	}
	threads := o.threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	p := &seqPeer{file: f.Name(), script: script, sets: sets, steps: o.epochSteps}
	p.cmd = exec.Command("/usr/bin/python3", script, "--model", name, "--epochs", strconv.Itoa(o.epochs),
		"--batch", strconv.Itoa(o.batch), "--seed", strconv.FormatUint(o.seed, 10), "--threads", strconv.Itoa(threads), "--seqdata", f.Name(), "--vocab", strconv.Itoa(task.vocab), "--epoch-steps", strconv.Itoa(o.epochSteps))
	p.cmd.Args = append(p.cmd.Args, o.peerArgs...)
	p.cmd.Stdout = &p.out
	p.cmd.Stderr = os.Stderr
	if err := p.cmd.Start(); err != nil {
		os.Remove(f.Name())
		return nil, fmt.Errorf("PyTorch peer %s: %w", script, err)
	}
	return p, nil
}

// stop kills a peer whose results are no longer wanted (ngen's run failed).
func (p *seqPeer) stop() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	os.Remove(p.file)
}

// compare waits for the peer and prints its epochs beside ours.
func (p *seqPeer) compare(ours []epochResult) error {
	err := p.cmd.Wait()
	os.Remove(p.file)
	script, sets := p.script, p.sets
	fmt.Printf("\nPyTorch (%s, same model, data, epochs, batch, seed and threads):\n", script)
	if err != nil {
		return fmt.Errorf("PyTorch peer %s: %w", script, err)
	}
	var theirs []epochResult
	for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
		var r epochResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("PyTorch peer %s printed %q: %w", script, line, err)
		}
		theirs = append(theirs, r)
	}
	if ours == nil { // -torch-only
		return printPeerOnly(theirs, sets.Train.YPer > 1)
	}
	if len(theirs) != len(ours) {
		return fmt.Errorf("PyTorch peer %s ran %d epochs, ngen %d", script, len(theirs), len(ours))
	}
	for i, r := range theirs {
		if p.steps > 0 && ours[i].Steps > 0 && r.Steps != ours[i].Steps {
			return fmt.Errorf("PyTorch peer %s trained epoch %d for %d steps, ngen for %d", script, r.Epoch, r.Steps, ours[i].Steps)
		}
	}
	metric, pick := "val acc", func(r epochResult) string { return fmt.Sprintf("%.2f%%", 100*r.ValAcc) }
	if sets.Train.YPer > 1 {
		metric, pick = "val bpc", func(r epochResult) string { return fmt.Sprintf("%.4f", r.BPC) }
	}
	fmt.Printf("%5s  %12s  %12s  %10s  %10s  %12s  %12s\n", "epoch", "ngen "+metric, "torch "+metric, "ngen loss", "torch loss", "ngen seq/s", "torch seq/s")
	for i, a := range ours {
		b := theirs[i]
		fmt.Printf("%5d  %12s  %12s  %10.4f  %10.4f  %12.0f  %12.0f\n", a.Epoch, pick(a), pick(b), a.Loss, b.Loss, a.PerSecond, b.PerSecond)
	}
	if sets.Test != nil && len(ours) > 0 {
		fmt.Printf("test accuracy: ngen %.2f%%, PyTorch %.2f%%\n", 100*ours[len(ours)-1].Acc, 100*theirs[len(theirs)-1].Acc)
	}
	return nil
}

// writeSeqSets writes the splits for bench/torch_train.py --seqdata: for
// train, validation and test in turn, little-endian i32s N, T, YPer and
// hasLen (N = 0 for a missing split), then X [N, T], Y [N, YPer] and,
// when hasLen, Len [N].
func writeSeqSets(f *os.File, sets *seqSets) error {
	w := bufio.NewWriter(f)
	for _, s := range []*data.Sequences{sets.Train, sets.Val, sets.Test} {
		if s == nil {
			s = &data.Sequences{}
		}
		hasLen := int32(0)
		if s.Len != nil {
			hasLen = 1
		}
		binary.Write(w, binary.LittleEndian, []int32{int32(s.N), int32(s.T), int32(s.YPer), hasLen})
		binary.Write(w, binary.LittleEndian, s.X)
		binary.Write(w, binary.LittleEndian, s.Y)
		if s.Len != nil {
			binary.Write(w, binary.LittleEndian, s.Len)
		}
	}
	return w.Flush()
}

// printPeerOnly prints the peer's epochs for -torch-only, where ngen did
// not train.
func printPeerOnly(theirs []epochResult, bpc bool) error {
	metric, pick := "val acc", func(r epochResult) string { return fmt.Sprintf("%.2f%%", 100*r.ValAcc) }
	if bpc {
		metric, pick = "val bpc", func(r epochResult) string { return fmt.Sprintf("%.4f", r.BPC) }
	}
	fmt.Printf("%5s  %12s  %10s  %12s  %6s\n", "epoch", "torch "+metric, "torch loss", "torch seq/s", "steps")
	for _, r := range theirs {
		fmt.Printf("%5d  %12s  %10.4f  %12.0f  %6d\n", r.Epoch, pick(r), r.Loss, r.PerSecond, r.Steps)
	}
	return nil
}

// checkTorchOnly refuses what -torch-only cannot do: it trains no ngen
// model, so there is nothing to save, sample, profile, plot or share
// between processes.
func checkTorchOnly(seq bool, set map[string]bool) error {
	if !seq {
		return fmt.Errorf("-torch-only: only the sequence models (%s) take it", strings.Join(seqNames(), ", "))
	}
	for _, f := range []string{"save", "load", "sample", "profile", "plot", "trace", "dist", "accumulate"} {
		if set[f] {
			return fmt.Errorf("-torch-only: -%s needs ngen's run, which -torch-only leaves out", f)
		}
	}
	return nil
}
