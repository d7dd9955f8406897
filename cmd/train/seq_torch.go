package main

import (
	"bufio"
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
// sequences ngen trained on: they are written to a temporary file
// (writeSeqSets) rather than loaded again in Python, so the two sides
// cannot disagree about the data or its split.
func compareSeq(ours []epochResult, task seqTask, script, name string, o seqOptions) error {
	dir := o.dir
	if dir == "" {
		dir = task.dataDir
	}
	sets, err := task.load(dir)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "ngen-seq-*.bin")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := writeSeqSets(f, sets); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	threads := o.threads
	if threads <= 0 {
		threads = goruntime.NumCPU()
	}
	fmt.Printf("\nPyTorch (%s, same model, data, epochs, batch, seed and threads):\n", script)
	cmd := exec.Command("/usr/bin/python3", script, "--model", name, "--epochs", strconv.Itoa(o.epochs),
		"--batch", strconv.Itoa(o.batch), "--seed", strconv.FormatUint(o.seed, 10), "--threads", strconv.Itoa(threads), "--seqdata", f.Name(), "--vocab", strconv.Itoa(task.vocab), "--epoch-steps", strconv.Itoa(o.epochSteps))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("PyTorch peer %s: %w", script, err)
	}
	var theirs []epochResult
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r epochResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("PyTorch peer %s printed %q: %w", script, line, err)
		}
		theirs = append(theirs, r)
	}
	if len(theirs) != len(ours) {
		return fmt.Errorf("PyTorch peer %s ran %d epochs, ngen %d", script, len(theirs), len(ours))
	}
	for i, r := range theirs {
		if o.epochSteps > 0 && ours[i].Steps > 0 && r.Steps != ours[i].Steps {
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
