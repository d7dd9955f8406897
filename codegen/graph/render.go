package graph

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoGraphviz is returned by Render when Graphviz's dot is not on PATH.
var ErrNoGraphviz = errors.New("graphviz's dot is not on PATH: install graphviz (Debian: apt-get install graphviz; bash scripts/setup.sh does), or write .dot")

// Formats are the output formats by file extension.
var Formats = map[string]string{".svg": "svg", ".png": "png", ".dot": "dot"}

// FormatOf is the output format a file name asks for.
func FormatOf(path string) (string, error) {
	if f, ok := Formats[strings.ToLower(filepath.Ext(path))]; ok {
		return f, nil
	}
	return "", fmt.Errorf("%s: unknown extension %q: want .svg, .png or .dot", path, filepath.Ext(path))
}

// Render turns DOT into format ("svg" or "png"; "dot" returns it as is)
// by running Graphviz's dot.
func Render(dot []byte, format string) ([]byte, error) {
	switch format {
	case "dot":
		return dot, nil
	case "svg", "png":
	default:
		return nil, fmt.Errorf("graph: cannot render %q: want svg, png or dot", format)
	}
	bin, err := exec.LookPath("dot")
	if err != nil {
		return nil, ErrNoGraphviz
	}
	cmd := exec.Command(bin, "-T"+format)
	cmd.Stdin = bytes.NewReader(dot)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("graphviz dot -T%s: %v: %s", format, err, strings.TrimSpace(stderr.String()))
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("graphviz dot -T%s wrote nothing: %s", format, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
