package data

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"
)

// The language of a word: words from Debian's word lists, characters as
// tokens, one class per language.

// DefaultDictDir is where Debian's word-list packages put their files.
const DefaultDictDir = "/usr/share/dict"

// WordLanguages are the classes in order: the file under DefaultDictDir
// and the Debian package that installs it (bash scripts/setup.sh train does).
var WordLanguages = []struct{ Name, File, Package string }{
	{"english", "american-english", "wamerican"},
	{"german", "ngerman", "wngerman"},
	{"french", "french", "wfrench"},
	{"spanish", "spanish", "wspanish"},
	{"italian", "italian", "witalian"},
}

// WordAlphabet is every character of the five lists once lower-cased:
// token id 2+i is WordAlphabet's i-th rune; 0 is padding and 1 any other
// character. Fixed, so a model declares its vocabulary (WordVocab) without
// reading the files.
const WordAlphabet = "-.abcdefghijklmnopqrstuvwxyzßàáâäåçèéêëìíîïñòóôöùúûü"

// WordVocab is the number of token ids of the word task.
var WordVocab = 2 + utf8.RuneCountInString(WordAlphabet)

var wordIDs = func() map[rune]int32 {
	m := map[rune]int32{}
	i := int32(2)
	for _, r := range WordAlphabet {
		m[r] = i
		i++
	}
	return m
}()

// WordOptions selects the words.
type WordOptions struct {
	// MaxLen is the sequence length T: longer words are left out (counted
	// in Words.TooLong). Default 16.
	MaxLen int
	// PerClass, when positive, keeps at most that many words of each
	// language (the first by hash, so the choice is fixed): the lists
	// range from 75 000 (English) to 356 000 (German) words.
	PerClass int
}

// Words is the word-language dataset.
type Words struct {
	Train, Val, Test *Sequences
	// Ambiguous counts words left out because, lower-cased, they occur in
	// more than one language's list; Possessive those with an apostrophe
	// (English "'s" forms, a giveaway); TooLong those over MaxLen.
	Ambiguous, Possessive, TooLong int
}

// LoadWords reads the five word lists from dir. Words are lower-cased
// (German nouns' capitals would give the class away); the split is by an
// FNV-1a hash of the word: 10% test, 10% validation, 80% training.
func LoadWords(dir string, o WordOptions) (*Words, error) {
	if o.MaxLen == 0 {
		o.MaxLen = 16
	}
	if o.MaxLen < 1 {
		return nil, fmt.Errorf("words: MaxLen %d must be positive", o.MaxLen)
	}
	w := &Words{}
	lang := map[string]int{} // word → class, -1 when ambiguous
	for c, l := range WordLanguages {
		words, err := readWordList(filepath.Join(dir, l.File), l.Package)
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for _, word := range words {
			if strings.ContainsRune(word, '\'') {
				w.Possessive++
				continue
			}
			word = strings.ToLower(word)
			if seen[word] {
				continue
			}
			seen[word] = true
			if prev, ok := lang[word]; ok && prev != c {
				lang[word] = -1
				continue
			}
			lang[word] = c
		}
	}
	byClass := make([][]string, len(WordLanguages))
	for word, c := range lang {
		if c < 0 {
			w.Ambiguous++
			continue
		}
		if utf8.RuneCountInString(word) > o.MaxLen {
			w.TooLong++
			continue
		}
		byClass[c] = append(byClass[c], word)
	}
	split := [3][]string{}
	var classes [3][]int32
	for c, words := range byClass {
		hs := make(map[string]uint64, len(words))
		for _, word := range words {
			hs[word] = hash64(word)
		}
		sort.Slice(words, func(i, j int) bool {
			hi, hj := hs[words[i]], hs[words[j]]
			return hi < hj || hi == hj && words[i] < words[j]
		})
		if o.PerClass > 0 && len(words) > o.PerClass {
			words = words[:o.PerClass]
		}
		for _, word := range words {
			k := 0 // train
			switch hash64("split:"+word) % 10 {
			case 0:
				k = 2 // test
			case 1:
				k = 1 // validation
			}
			split[k] = append(split[k], word)
			classes[k] = append(classes[k], int32(c))
		}
	}
	sets := make([]*Sequences, 3)
	for k := range sets {
		sets[k] = wordSequences(split[k], classes[k], o.MaxLen)
	}
	w.Train, w.Val, w.Test = sets[0], sets[1], sets[2]
	return w, nil
}

func wordSequences(words []string, classes []int32, T int) *Sequences {
	s := &Sequences{X: make([]int32, len(words)*T), Y: classes, Len: make([]int32, len(words)), N: len(words), T: T, YPer: 1}
	for i, word := range words {
		rs := []rune(word)
		s.Len[i] = int32(len(rs))
		row := s.X[i*T : (i+1)*T]
		for j, r := range rs {
			id, ok := wordIDs[r]
			if !ok {
				id = 1
			}
			row[T-len(rs)+j] = id
		}
	}
	return s
}

// readWordList reads one word per line, checking the file is UTF-8.
func readWordList(path, pkg string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("words: %s not found; install Debian's %s (bash scripts/setup.sh train does)", path, pkg)
	}
	if err != nil {
		return nil, fmt.Errorf("words: %v", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		word := strings.TrimSpace(sc.Text())
		if !utf8.ValidString(word) {
			return nil, fmt.Errorf("words: %s:%d: not UTF-8 text", path, line)
		}
		if strings.ContainsAny(word, " \t") {
			return nil, fmt.Errorf("words: %s:%d: %q is not one word", path, line, word)
		}
		if word != "" {
			out = append(out, word)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("words: %s: %v", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("words: %s holds no words", path)
	}
	return out, nil
}
