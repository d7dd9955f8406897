package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func wordFiles() map[string]string {
	return map[string]string{
		"american-english": "house\nHouse's\ncat\nsupercalifragilistic\nhand\n",
		"ngerman":          "Haus\nKatze\nHand\n",
		"french":           "maison\nchat\nété\n",
		"spanish":          "casa\ngato\n",
		"italian":          "casa\ngatto\nperché\n",
	}
}

func TestLoadWords(t *testing.T) {
	dir := writeFiles(t, wordFiles())
	w, err := LoadWords(dir, WordOptions{MaxLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	// "hand" (English and German, lower-cased) and "casa" (Spanish and
	// Italian) are ambiguous; "House's" possessive; one word too long.
	if w.Ambiguous != 2 || w.Possessive != 1 || w.TooLong != 1 {
		t.Errorf("ambiguous %d, possessive %d, too long %d; want 2, 1, 1", w.Ambiguous, w.Possessive, w.TooLong)
	}
	got := map[string]int32{}
	for _, s := range []*Sequences{w.Train, w.Val, w.Test} {
		for i := 0; i < s.N; i++ {
			row := s.X[i*s.T : (i+1)*s.T]
			n := int(s.Len[i])
			// Left padding: the word fills the last Len positions.
			for j, id := range row {
				if (j < s.T-n) != (id == PadID) {
					t.Fatalf("row %v (len %d): padding must be exactly the first T-len positions", row, n)
				}
			}
			var word []rune
			for _, id := range row[s.T-n:] {
				word = append(word, []rune(WordAlphabet)[id-2])
			}
			got[string(word)] = s.Y[i]
		}
	}
	want := map[string]int32{"house": 0, "cat": 0, "haus": 1, "katze": 1, "maison": 2, "chat": 2, "été": 2, "gato": 3, "gatto": 4, "perché": 4}
	if len(got) != len(want) {
		t.Errorf("words %v, want %v", got, want)
	}
	for k, c := range want {
		if got[k] != c {
			t.Errorf("%q: class %d, want %d", k, got[k], c)
		}
	}
	// The split is a function of the word: loading again gives the same sets.
	w2, _ := LoadWords(dir, WordOptions{MaxLen: 8})
	if !slices.Equal(w.Train.X, w2.Train.X) || !slices.Equal(w.Test.Y, w2.Test.Y) {
		t.Error("two loads differ")
	}
	m := make([]int32, 8)
	w.Train.Mask(m, []int32{0})
	if n := int(w.Train.Len[0]); slices.Index(m, 1) != 8-n || m[7] != 1 {
		t.Errorf("mask %v for length %d", m, n)
	}
}

func TestLoadWordsErrors(t *testing.T) {
	files := wordFiles()
	delete(files, "ngerman")
	if _, err := LoadWords(writeFiles(t, files), WordOptions{}); err == nil || !strings.Contains(err.Error(), "ngerman not found; install Debian's wngerman") {
		t.Errorf("missing list: %v", err)
	}
	files = wordFiles()
	files["french"] = "chat\nch\xe9ri\n"
	if _, err := LoadWords(writeFiles(t, files), WordOptions{}); err == nil || !strings.Contains(err.Error(), "french:2: not UTF-8") {
		t.Errorf("latin-1 list: %v", err)
	}
	files = wordFiles()
	files["spanish"] = "\n\n"
	if _, err := LoadWords(writeFiles(t, files), WordOptions{}); err == nil || !strings.Contains(err.Error(), "spanish holds no words") {
		t.Errorf("empty list: %v", err)
	}
}

func TestLoadFortunes(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 40; i++ {
		b.WriteString("fortune " + strings.Repeat("x", i) + "\n\tsaid\n%\n")
	}
	dir := writeFiles(t, map[string]string{"a": b.String(), "a.dat": "\x00\x01binary index", "b": "%\nlast one\n"})
	text, err := LoadFortunes(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := text.TrainFortunes + text.ValFortunes; n != 41 || text.ValFortunes == 0 {
		t.Fatalf("%d train + %d validation fortunes, want 41 with some in validation", text.TrainFortunes, text.ValFortunes)
	}
	decode := func(ids []int32) string {
		var s []rune
		for _, id := range ids {
			s = append(s, CharOf(id))
		}
		return string(s)
	}
	all := decode(text.Train) + "\n\n" + decode(text.Val)
	if strings.Contains(all, "%") || strings.Contains(all, "binary") || !strings.Contains(all, "fortune xxx\n\tsaid\n\nfortune") || !strings.Contains(all, "last one") {
		t.Errorf("corpus text: %q", all[:min(200, len(all))])
	}
	s, err := Windows(text.Train, 7)
	if err != nil {
		t.Fatal(err)
	}
	if s.N != (len(text.Train)-1)/7 || !slices.Equal(s.X[1:7], s.Y[:6]) || s.Y[6] != text.Train[7] {
		t.Errorf("windows: N %d, X %v, Y %v", s.N, s.X[:7], s.Y[:7])
	}
	if _, err := Windows(text.Train[:5], 7); err == nil {
		t.Error("5 tokens cut into windows of 7")
	}
}

func TestLoadFortunesErrors(t *testing.T) {
	if _, err := LoadFortunes(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "install Debian's fortunes") {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := LoadFortunes(writeFiles(t, map[string]string{"x.dat": "idx"})); err == nil || !strings.Contains(err.Error(), "no fortune files") {
		t.Errorf("no files: %v", err)
	}
	if _, err := LoadFortunes(writeFiles(t, map[string]string{"a": "ok\n%\nbad \xff\n"})); err == nil || !strings.Contains(err.Error(), "a:3: not UTF-8") {
		t.Errorf("bad bytes: %v", err)
	}
}

func TestCharVocab(t *testing.T) {
	for _, r := range "\n\t A~az09%" {
		if CharOf(CharID(r)) != r {
			t.Errorf("%q round-trips to %q", r, CharOf(CharID(r)))
		}
	}
	if CharID('é') != charOther || CharID('~') != CharVocab-1 {
		t.Error("vocabulary edges")
	}
}

// TestDebianText reads the installed corpora (scripts/setup.sh installs
// them) and checks their sizes and the balance of the split.
func TestDebianText(t *testing.T) {
	w, err := LoadWords(DefaultDictDir, WordOptions{})
	if err != nil {
		t.Skip(err)
	}
	counts := make([]int, len(WordLanguages))
	for _, y := range w.Train.Y {
		counts[y]++
	}
	total := w.Train.N + w.Val.N + w.Test.N
	if total < 500000 || slices.Min(counts) < 40000 || w.Val.N < total/12 || w.Test.N < total/12 {
		t.Errorf("train per class %v, val %d, test %d of %d", counts, w.Val.N, w.Test.N, total)
	}
	text, err := LoadFortunes(DefaultFortunesDir)
	if err != nil {
		t.Skip(err)
	}
	other := 0
	for _, id := range text.Train {
		if id == charOther {
			other++
		}
	}
	if len(text.Train) < 2000000 || len(text.Val) < 150000 || other > 1000 {
		t.Errorf("fortunes: %d train, %d validation tokens, %d outside the vocabulary", len(text.Train), len(text.Val), other)
	}
	t.Logf("words: train %d (per class %v), val %d, test %d; ambiguous %d, possessive %d, too long %d; fortunes: %d/%d tokens",
		w.Train.N, counts, w.Val.N, w.Test.N, w.Ambiguous, w.Possessive, w.TooLong, len(text.Train), len(text.Val))
}

func TestSeqLoader(t *testing.T) {
	s := wordSequences([]string{"ab", "c", "abc", "ba", "a"}, []int32{0, 1, 2, 3, 4}, 3)
	l := must(NewSeqLoader(s, 2, true, 7))
	if l.Len() != 3 {
		t.Fatalf("Len %d, want 3", l.Len())
	}
	seen := map[int32]bool{}
	for {
		x, y, mask, ok := l.Next()
		if !ok {
			break
		}
		for i, c := range y {
			seen[c] = true
			k := c // classes are the sample indices here
			if !slices.Equal(x[i*3:(i+1)*3], s.X[k*3:(k+1)*3]) {
				t.Errorf("sample %d: x %v, want %v", k, x[i*3:(i+1)*3], s.X[k*3:(k+1)*3])
			}
			for j := 0; j < 3; j++ {
				if (mask[i*3+j] == 1) != (x[i*3+j] != PadID) {
					t.Errorf("sample %d: mask %v for x %v", k, mask[i*3:(i+1)*3], x[i*3:(i+1)*3])
				}
			}
		}
	}
	if len(seen) != 5 {
		t.Errorf("epoch visited %v, want all 5", seen)
	}
}
