package data

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// Next-character prediction on Debian's fortunes corpus.

// DefaultFortunesDir is where Debian's fortunes package puts its files.
const DefaultFortunesDir = "/usr/share/games/fortunes"

// The character vocabulary: 0 padding (unused by the corpus, kept so ids
// agree with the word task), 1 any other character, 2 newline, 3 tab, then
// printable ASCII from space to '~'. Fixed, so a model declares its
// vocabulary (CharVocab) without reading the files; the corpus is ASCII
// but for a few dozen characters.
const (
	charOther   = 1
	charNewline = 2
	charTab     = 3
	charFirst   = 4 // ' '
	// CharVocab is the number of token ids of the character task.
	CharVocab = charFirst + '~' - ' ' + 1
)

// CharID is the token id of r.
func CharID(r rune) int32 {
	switch {
	case r == '\n':
		return charNewline
	case r == '\t':
		return charTab
	case r >= ' ' && r <= '~':
		return charFirst + int32(r-' ')
	}
	return charOther
}

// CharOf is the character of token id (U+FFFD for padding and others).
func CharOf(id int32) rune {
	switch {
	case id == charNewline:
		return '\n'
	case id == charTab:
		return '\t'
	case id >= charFirst && id < CharVocab:
		return ' ' + rune(id-charFirst)
	}
	return utf8.RuneError
}

// Text is a tokenised corpus split in two.
type Text struct {
	Train, Val []int32
	// Fortunes counts the fortunes of each part.
	TrainFortunes, ValFortunes int
}

// LoadFortunes reads every fortune file in dir (the files without an
// extension: each .dat is an index, each .u8 a link to its file), in name
// order, splits them at the lines holding "%", and assigns each fortune by
// an FNV-1a hash of its text: 10% to validation, the rest to training.
// Each part is its fortunes joined by blank lines.
func LoadFortunes(dir string) (*Text, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("fortunes: %s not found; install Debian's fortunes (bash scripts/setup.sh train does)", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("fortunes: %v", err)
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() && !strings.Contains(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("fortunes: no fortune files in %s", dir)
	}
	t := &Text{}
	for _, name := range names {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("fortunes: %v", err)
		}
		if !utf8.Valid(b) {
			line := 1 + bytes.Count(b[:firstInvalid(b)], []byte("\n"))
			return nil, fmt.Errorf("fortunes: %s:%d: not UTF-8 text", path, line)
		}
		for _, f := range splitFortunes(string(b)) {
			if hash64(f)%10 == 0 {
				t.Val = appendText(t.Val, f)
				t.ValFortunes++
			} else {
				t.Train = appendText(t.Train, f)
				t.TrainFortunes++
			}
		}
	}
	if t.ValFortunes == 0 || t.TrainFortunes == 0 {
		return nil, fmt.Errorf("fortunes: %s holds %d fortunes, too few to split", dir, t.TrainFortunes+t.ValFortunes)
	}
	return t, nil
}

func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// splitFortunes cuts a fortune file at its "%" lines, dropping empty
// fortunes and trailing newlines.
func splitFortunes(s string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		if f := strings.TrimRight(cur.String(), "\n"); strings.TrimSpace(f) != "" {
			out = append(out, f)
		}
		cur.Reset()
	}
	for _, line := range strings.SplitAfter(s, "\n") {
		if strings.TrimRight(line, "\r\n") == "%" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

// appendText appends fortune f's token ids, separated from what precedes
// by a blank line.
func appendText(ids []int32, f string) []int32 {
	if len(ids) > 0 {
		ids = append(ids, charNewline, charNewline)
	}
	for _, r := range f {
		ids = append(ids, CharID(r))
	}
	return ids
}

// Windows cuts ids into non-overlapping sequences of T tokens, each with
// the T tokens that follow it one position later as targets; the tail
// shorter than T+1 is left out.
func Windows(ids []int32, T int) (*Sequences, error) {
	if T < 1 {
		return nil, fmt.Errorf("fortunes: sequence length %d must be positive", T)
	}
	n := (len(ids) - 1) / T
	if n < 1 {
		return nil, fmt.Errorf("fortunes: %d tokens make no sequence of %d", len(ids), T)
	}
	s := &Sequences{X: make([]int32, n*T), Y: make([]int32, n*T), N: n, T: T, YPer: T}
	for i := 0; i < n; i++ {
		copy(s.X[i*T:(i+1)*T], ids[i*T:(i+1)*T])
		copy(s.Y[i*T:(i+1)*T], ids[i*T+1:(i+1)*T+1])
	}
	return s, nil
}
