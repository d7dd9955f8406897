package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ngen-ml/ngen/internal/outfile"
	"github.com/ngen-ml/ngen/runlog"
	"github.com/ngen-ml/ngen/runlog/curves"
)

// plotCmd is ngen plot: the curves of one or more run logs (cmd/train
// -log) on the same axes.
func plotCmd(args []string) error {
	fs := flag.NewFlagSet("plot", flag.ExitOnError)
	out := fs.String("o", "", "output picture: .png or .svg")
	win := fs.Int("smooth", 0, "steps in the moving mean over the losses (0: a fiftieth of the longest run)")
	title := fs.String("title", "", "title (default: the runs' models)")
	fs.Parse(args)
	if fs.NArg() == 0 {
		return fmt.Errorf("plot: want one or more run logs (cmd/train -log run.jsonl)")
	}
	if *out == "" {
		return fmt.Errorf("plot: give the picture to write with -o FILE.png or -o FILE.svg")
	}
	if *win < 0 {
		return fmt.Errorf("plot: -smooth %d: want 0 (automatic) or more steps", *win)
	}
	if err := outfile.Check("plot -o", *out, ".png", ".svg"); err != nil {
		return err
	}
	runs, err := readRuns(fs.Args())
	if err != nil {
		return fmt.Errorf("plot: %v", err)
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(*out)), ".")
	data, err := curves.Render(runs, format, curves.Options{Smooth: *win, Title: *title})
	if err != nil {
		return err
	}
	if err := outfile.Write(*out, data); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "ngen: %d runs -> %s\n", len(runs), *out)
	return nil
}

// readRuns reads the logs and names each run by its framework and model,
// adding the file name where two would read alike.
func readRuns(paths []string) ([]curves.Run, error) {
	var runs []curves.Run
	seen := map[string]int{}
	for _, p := range paths {
		l, err := runlog.ReadFile(p)
		if err != nil {
			return nil, err
		}
		fw := l.Run.Framework
		if fw == "pytorch" {
			fw = "PyTorch" // as cmd/train -plot names it
		}
		name := strings.TrimSpace(fw + " " + l.Run.Model)
		if name == "" {
			name = filepath.Base(p)
		}
		seen[name]++
		runs = append(runs, curves.Run{Name: name, Log: l})
	}
	for i, p := range paths {
		if seen[runs[i].Name] > 1 {
			runs[i].Name += " (" + filepath.Base(p) + ")"
		}
	}
	return runs, nil
}
