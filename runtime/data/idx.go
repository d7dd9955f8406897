// Package data supplies training data to generated ngen packages: it reads
// IDX files, loads Fashion-MNIST as float32 features with int32 labels, and
// batches a Dataset for a training loop, much like torch.utils.data.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime. This package sits
// beside the runtime: it only produces host slices, which the caller copies to
// the device. It has no cgo so that tools and tests can use it anywhere.
package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// IDX is the content of one IDX file (the format of the MNIST family).
// Data is row-major with the last dimension fastest.
type IDX struct {
	Dims []int
	Data []byte
}

// idxTypes names the IDX element type codes, for error messages.
var idxTypes = map[byte]string{
	0x08: "unsigned byte",
	0x09: "signed byte",
	0x0B: "int16",
	0x0C: "int32",
	0x0D: "float32",
	0x0E: "float64",
}

// maxIDXElems bounds the element count a header may claim, so that a corrupt
// header fails with an error rather than a huge allocation.
const maxIDXElems = 1 << 32

// ReadIDX reads an IDX file, gzip-compressed or plain; the gzip magic decides,
// not the file name. Only the unsigned byte element type is supported.
func ReadIDX(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	idx, err := decodeIDX(f)
	if err != nil {
		return nil, fmt.Errorf("read IDX %s: %w", path, err)
	}
	return idx, nil
}

func decodeIDX(r io.Reader) (*IDX, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}

	var head [4]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, fmt.Errorf("bad magic % x: not an IDX file", head[:2])
	}
	if head[2] != 0x08 {
		name, ok := idxTypes[head[2]]
		if !ok {
			return nil, fmt.Errorf("unknown element type 0x%02x", head[2])
		}
		return nil, fmt.Errorf("element type %s (0x%02x) is not supported; only unsigned byte (0x08) is", name, head[2])
	}
	ndim := int(head[3])
	if ndim == 0 {
		return nil, fmt.Errorf("zero dimensions")
	}
	raw := make([]byte, 4*ndim)
	if _, err := io.ReadFull(br, raw); err != nil {
		return nil, fmt.Errorf("dimensions: %w", err)
	}
	dims := make([]int, ndim)
	n := int64(1)
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
		// Checked before multiplying: two dimensions of 2^32-1 wrapped
		// the product negative and make panicked.
		if d := int64(dims[i]); d != 0 && n > maxIDXElems/d {
			return nil, fmt.Errorf("dimensions %v claim more than %d elements", dims[:i+1], int64(maxIDXElems))
		}
		n *= int64(dims[i])
	}
	// Read what is there, growing the buffer as data arrives, so a short
	// file with a large header costs no large allocation.
	body, err := io.ReadAll(io.LimitReader(br, n))
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	if int64(len(body)) < n {
		return nil, fmt.Errorf("data: want %d bytes for dims %v, got %d", n, dims, len(body))
	}
	// A longer body means the header and the file disagree, which a truncated
	// header would also produce; both are corruption, not padding.
	if extra, _ := io.Copy(io.Discard, br); extra > 0 {
		return nil, fmt.Errorf("data: %d bytes after the %d that dims %v call for", extra, n, dims)
	}
	return &IDX{Dims: dims, Data: body}, nil
}
