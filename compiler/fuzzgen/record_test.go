package fuzzgen

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// recordLine is one line TestFuzz's -record writes: a group of models
// from seed first, compiled into one program, and what failed.
type recordLine struct {
	First    uint64    `json:"first"`
	Models   int       `json:"models"`
	Failures []Failure `json:"failures"`
	Seconds  float64   `json:"seconds"`
	Date     string    `json:"date"`
}

// recordFiles are the runs docs/FUZZ.md counts.
var recordFiles = filepath.Join("..", "..", "testdata", "fuzz", "*.jsonl")

// readRecords reads every record line, in file order.
func readRecords(t *testing.T) []recordLine {
	files, err := filepath.Glob(recordFiles)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var out []recordLine
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		for n := 1; sc.Scan(); n++ {
			var r recordLine
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatalf("%s:%d: %v", name, n, err)
			}
			if r.Models <= 0 {
				t.Fatalf("%s:%d: a group of %d models", name, n, r.Models)
			}
			out = append(out, r)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFuzzRecordMatchesDocs counts the distinct seeds the records of
// testdata/fuzz checked and those whose latest check failed (open), and
// wants docs/FUZZ.md to state both numbers as they are, so that the
// count the documentation claims is the one the records show.
func TestFuzzRecordMatchesDocs(t *testing.T) {
	recs := readRecords(t)
	if len(recs) == 0 {
		t.Fatalf("no records in %s", recordFiles)
	}
	open := map[uint64]bool{} // every seed checked: whether its latest check failed
	for _, r := range recs {
		bad := map[int]bool{}
		for _, f := range r.Failures {
			bad[f.Spec] = true
		}
		for k := 0; k < r.Models; k++ {
			open[r.First+uint64(k)] = bad[k] || bad[-1]
		}
	}
	var failing []string
	for s, o := range open {
		if o {
			failing = append(failing, fmt.Sprint(s))
		}
	}
	sort.Strings(failing)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "FUZZ.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d distinct models checked, %d open", len(open), len(failing))
	if !strings.Contains(string(doc), want) {
		t.Errorf("docs/FUZZ.md does not say %q, which the records in %s show (open seeds: %v)", want, recordFiles, failing)
	}
}
