// Package safetensors reads and writes the safetensors format
// (huggingface/safetensors): an 8-byte little-endian header length, a JSON
// header mapping each tensor name to its dtype, shape and byte range, and
// the tensors' bytes back to back. ngen checkpoints are safetensors files
// (runtime/checkpoint.go), so PyTorch's state_dict names and tensors cross
// over in both directions.
//
// Parse trusts nothing: a header over MaxHeader, malformed JSON, duplicate
// names or fields (a "shape" given twice; encoding/json would keep the
// last), unknown dtypes, shapes whose size overflows, byte ranges that
// overlap, leave gaps, disagree with the shape or run past the end, and
// trailing bytes are all errors that name the tensor. It is fuzzed
// (FuzzParse).
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"sort"
)

// MaxHeader is the largest header accepted, the limit of the reference
// implementation.
const MaxHeader = 100 << 20

// DTypeSize maps the dtypes this package knows to their sizes in bytes.
var DTypeSize = map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// Tensor is one named tensor.
type Tensor struct {
	Name  string
	DType string
	Shape []int64
	Data  []byte // little-endian, row-major
}

// Elems is the tensor's element count.
func (t *Tensor) Elems() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is a parsed safetensors file.
type File struct {
	Metadata map[string]string
	Tensors  []Tensor // in the order of their data
	// Header is the raw JSON header, for checksums over it.
	Header []byte
}

// Lookup returns the named tensor.
func (f *File) Lookup(name string) (*Tensor, bool) {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}

type entry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"` // two: a [2]int64 dropped a third silently

}

func shapeJSON(s []int64) string {
	if s == nil {
		return "null"
	}
	return fmt.Sprint(s)
}

// Parse decodes a whole file held in b.
func Parse(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes, shorter than the 8-byte header length", len(b))
	}
	hl := binary.LittleEndian.Uint64(b)
	if hl > MaxHeader {
		return nil, fmt.Errorf("safetensors: header of %d bytes exceeds the %d-byte limit", hl, MaxHeader)
	}
	if hl > uint64(len(b)-8) {
		return nil, fmt.Errorf("safetensors: header of %d bytes runs past the end of the %d-byte file", hl, len(b))
	}
	hdr := b[8 : 8+hl]
	data := b[8+hl:]
	f := &File{Header: hdr, Metadata: map[string]string{}}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("safetensors: header is not a JSON object")
	}
	seen := map[string]bool{}
	var ents []entry
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("safetensors: header: %v", err)
		}
		name, ok := t.(string)
		if !ok {
			return nil, fmt.Errorf("safetensors: header: key %v is not a string", t)
		}
		if seen[name] {
			return nil, fmt.Errorf("safetensors: tensor %q appears twice in the header", name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %v", name, err)
		}
		// encoding/json keeps the last of two equal keys; the reference
		// parser (serde) refuses them, and so does this one.
		if k, dup := duplicateKey(raw); dup {
			return nil, fmt.Errorf("safetensors: %s: field %q appears twice", what(name), k)
		}
		if name == "__metadata__" {
			if err := json.Unmarshal(raw, &f.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var e entry
		d := json.NewDecoder(bytes.NewReader(raw))
		d.DisallowUnknownFields()
		if err := d.Decode(&e); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %v", name, err)
		}
		if !bytes.Contains(raw, []byte(`"data_offsets"`)) || !bytes.Contains(raw, []byte(`"shape"`)) {
			return nil, fmt.Errorf("safetensors: tensor %q lacks shape or data_offsets", name)
		}
		// The reference parser (serde) wants a list for shape and two
		// offsets; encoding/json read null as no dimensions and ignored
		// offsets past two.
		if e.Shape == nil || len(e.DataOffsets) != 2 {
			return nil, fmt.Errorf("safetensors: tensor %q: shape %s and data_offsets %v: want a list of dimensions and two offsets", name, shapeJSON(e.Shape), e.DataOffsets)
		}
		es, ok := DTypeSize[e.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", name, e.DType)
		}
		n := uint64(es)
		for _, dim := range e.Shape {
			if dim < 0 {
				return nil, fmt.Errorf("safetensors: tensor %q: negative dimension in shape %v", name, e.Shape)
			}
			hi, lo := bits.Mul64(n, uint64(dim))
			if hi != 0 || lo > math.MaxInt64 {
				return nil, fmt.Errorf("safetensors: tensor %q: shape %v overflows", name, e.Shape)
			}
			n = lo
		}
		lo, hi := e.DataOffsets[0], e.DataOffsets[1]
		if lo < 0 || hi < lo || uint64(hi) > uint64(len(data)) {
			return nil, fmt.Errorf("safetensors: tensor %q: byte range [%d, %d) outside the %d bytes of data", name, lo, hi, len(data))
		}
		if uint64(hi-lo) != n {
			return nil, fmt.Errorf("safetensors: tensor %q: %s%v needs %d bytes, its range holds %d", name, e.DType, e.Shape, n, hi-lo)
		}
		f.Tensors = append(f.Tensors, Tensor{Name: name, DType: e.DType, Shape: e.Shape, Data: data[lo:hi]})
		ents = append(ents, e)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("safetensors: header: %v", err)
	}
	if len(bytes.TrimRight(hdr[dec.InputOffset():], " ")) != 0 {
		return nil, fmt.Errorf("safetensors: bytes after the header's JSON object")
	}
	// The ranges must tile the data exactly: sorted by start, each begins
	// where the previous ended (no overlap, no gap) and the last ends at
	// the end of the file (no trailing bytes).
	order := make([]int, len(ents))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return ents[order[a]].DataOffsets[0] < ents[order[b]].DataOffsets[0] })
	at := int64(0)
	sorted := make([]Tensor, len(order))
	for k, i := range order {
		e := ents[i]
		if e.DataOffsets[0] != at {
			what := "leaves a gap before it"
			if e.DataOffsets[0] < at {
				what = "overlaps the tensor before it"
			}
			return nil, fmt.Errorf("safetensors: tensor %q: byte range [%d, %d) %s (expected start %d)", f.Tensors[i].Name, e.DataOffsets[0], e.DataOffsets[1], what, at)
		}
		at = e.DataOffsets[1]
		sorted[k] = f.Tensors[i]
	}
	if at != int64(len(data)) {
		return nil, fmt.Errorf("safetensors: %d trailing bytes after the last tensor", int64(len(data))-at)
	}
	f.Tensors = sorted
	return f, nil
}

// what names a top-level header entry in messages.
func what(name string) string {
	if name == "__metadata__" {
		return name
	}
	return fmt.Sprintf("tensor %q", name)
}

// duplicateKey reports the first key that appears twice in one object
// anywhere in the JSON value raw (which has already been decoded once, so
// is well formed).
func duplicateKey(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	// One frame per open array or object; an object's frame holds its
	// keys and whether the next string token is a key.
	type frame struct {
		keys  map[string]bool
		isKey bool
	}
	var stack []*frame
	for {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.isKey {
			if d, ok := t.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			k, _ := t.(string)
			if top.keys[k] {
				return k, true
			}
			top.keys[k] = true
			top.isKey = false
			continue
		}
		// A value (or an array's closing bracket).
		if top != nil && top.keys != nil {
			top.isKey = true
		}
		switch t {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, isKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].keys != nil {
				stack[len(stack)-1].isKey = true
			}
		}
		if len(stack) == 0 {
			return "", false
		}
	}
}

// Encode renders a file: the tensors in the given order, back to back.
// The header is padded with spaces to a multiple of 8 bytes, as the
// reference implementation does, so the data stays aligned.
func Encode(meta map[string]string, ts []Tensor) ([]byte, error) {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(meta) > 0 {
		sep()
		m, err := json.Marshal(meta) // keys sorted
		if err != nil {
			return nil, err
		}
		hdr.WriteString(`"__metadata__":`)
		hdr.Write(m)
	}
	seen := map[string]bool{}
	off := int64(0)
	for _, t := range ts {
		if seen[t.Name] || t.Name == "__metadata__" {
			return nil, fmt.Errorf("safetensors: tensor name %q used twice or reserved", t.Name)
		}
		seen[t.Name] = true
		es, ok := DTypeSize[t.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unknown dtype %q", t.Name, t.DType)
		}
		if t.Elems()*int64(es) != int64(len(t.Data)) {
			return nil, fmt.Errorf("safetensors: tensor %q: %s%v needs %d bytes, got %d", t.Name, t.DType, t.Shape, t.Elems()*int64(es), len(t.Data))
		}
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int64{}
		}
		sh, _ := json.Marshal(shape)
		sep()
		fmt.Fprintf(&hdr, `%s:{"dtype":%q,"shape":%s,"data_offsets":[%d,%d]}`, name, t.DType, sh, off, off+int64(len(t.Data)))
		off += int64(len(t.Data))
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8, 8+hdr.Len()+int(off))
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	for _, t := range ts {
		out = append(out, t.Data...)
	}
	return out, nil
}
