package safetensors

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

func raw(header string, data []byte) []byte {
	b := make([]byte, 8, 8+len(header)+len(data))
	binary.LittleEndian.PutUint64(b, uint64(len(header)))
	return append(append(b, header...), data...)
}

func valid(t testing.TB) []byte {
	b, err := Encode(map[string]string{"format": "pt"}, []Tensor{
		{Name: "fc1.weight", DType: "F32", Shape: []int64{2, 3}, Data: make([]byte, 24)},
		{Name: "fc1.bias", DType: "F32", Shape: []int64{2}, Data: make([]byte, 8)},
		{Name: "bn.num_batches_tracked", DType: "I64", Shape: []int64{}, Data: make([]byte, 8)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	b := valid(t)
	if binary.LittleEndian.Uint64(b)%8 != 0 {
		t.Fatal("header not padded to 8 bytes")
	}
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != 3 || f.Metadata["format"] != "pt" {
		t.Fatalf("parsed %+v", f)
	}
	if w, ok := f.Lookup("fc1.weight"); !ok || w.Elems() != 6 || len(w.Data) != 24 {
		t.Fatalf("fc1.weight: %+v", w)
	}
}

// rejects lists files Parse must reject, each with a word its error must
// contain (the tensor's name where there is one). They are also the fuzz
// seed corpus.
var rejects = []struct {
	name string
	file []byte
	want string
}{
	{"short", []byte{1, 2, 3}, "shorter"},
	{"header over 100 MB", binary.LittleEndian.AppendUint64(nil, 200<<20), "limit"},
	{"header length 2^64-1", binary.LittleEndian.AppendUint64(nil, ^uint64(0)), "limit"},
	{"header past end", binary.LittleEndian.AppendUint64(nil, 50), "past the end"},
	{"not json", raw("nope", nil), "JSON"},
	{"duplicate name", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), `"a" appears twice`},
	{"overlap", raw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)), `"b"`},
	{"gap", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}`, make([]byte, 12)), "gap"},
	{"past end", raw(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, make([]byte, 8)), `"a"`},
	{"trailing bytes", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 9)), "trailing"},
	{"range disagrees with shape", raw(`{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, make([]byte, 8)), `"a"`},
	{"shape overflows", raw(`{"a":{"dtype":"F32","shape":[4294967295,4294967295,4294967295],"data_offsets":[0,4]}}`, make([]byte, 4)), "overflows"},
	{"negative dim", raw(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)), "negative"},
	{"unknown dtype", raw(`{"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), "dtype"},
	{"unknown field", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, make([]byte, 4)), `"a"`},
	{"missing offsets", raw(`{"a":{"dtype":"F32","shape":[0]}}`, nil), `"a"`},
	{"metadata not strings", raw(`{"__metadata__":{"step":3}}`, nil), "__metadata__"},
	{"junk after object", raw(`{} x`, nil), "after"},
	// Issue 27: encoding/json took the last of two equal fields.
	{"duplicate shape", raw(`{"a":{"dtype":"F32","shape":[2],"shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `tensor "a": field "shape" appears twice`},
	{"duplicate dtype", raw(`{"a":{"dtype":"F64","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, make([]byte, 4)), `field "dtype" appears twice`},
	// Issue 27's second hostile pass: a [2]int64 took [0,4,4] as [0,4],
	// and a null shape read as a scalar.
	{"three offsets", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,4]}}`, make([]byte, 4)), `tensor "a": shape [1] and data_offsets [0 4 4]: want a list of dimensions and two offsets`},
	{"one offset", raw(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0]}}`, nil), `data_offsets [0]: want`},
	{"null shape", raw(`{"a":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, make([]byte, 4)), `shape null and data_offsets`},
	{"duplicate offsets", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8],"data_offsets":[0,4]}}`, make([]byte, 4)), `field "data_offsets" appears twice`},
	{"duplicate metadata key", raw(`{"__metadata__":{"ngen.lr":"1","ngen.lr":"3.4e38"}}`, nil), `__metadata__: field "ngen.lr" appears twice`},
	{"NaN offsets", raw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[NaN,4]}}`, make([]byte, 4)), `"a"`},
}

func TestRejects(t *testing.T) {
	for _, c := range rejects {
		_, err := Parse(c.file)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

// FuzzParse: whatever the bytes, Parse returns an error or a file whose
// tensors tile the data exactly and re-encode to a file that parses to
// the same tensors. It never panics.
func FuzzParse(f *testing.F) {
	f.Add(valid(f))
	for _, c := range rejects {
		f.Add(c.file)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			return
		}
		var total int
		for _, x := range p.Tensors {
			if int64(len(x.Data)) != x.Elems()*int64(DTypeSize[x.DType]) {
				t.Fatalf("tensor %q: %d bytes for %s%v", x.Name, len(x.Data), x.DType, x.Shape)
			}
			total += len(x.Data)
		}
		if hl := binary.LittleEndian.Uint64(b); uint64(total) != uint64(len(b))-8-hl {
			t.Fatalf("tensors cover %d of %d data bytes", total, uint64(len(b))-8-hl)
		}
		e, err := Encode(p.Metadata, p.Tensors)
		if err != nil {
			t.Fatalf("re-encoding a parsed file: %v", err)
		}
		q, err := Parse(e)
		if err != nil || len(q.Tensors) != len(p.Tensors) {
			t.Fatalf("re-encoded file: %v", err)
		}
		for i := range q.Tensors {
			if q.Tensors[i].Name != p.Tensors[i].Name || !bytes.Equal(q.Tensors[i].Data, p.Tensors[i].Data) {
				t.Fatalf("tensor %d differs after re-encoding", i)
			}
		}
	})
}
