package runtime

import (
	"slices"
	"strings"
)

// Checks of loaded values that are finite yet cannot come from training,
// and that would turn every weight non-finite on the next update after a
// step that reports success (the device guard tests gradients and loss,
// not the update's result).

// mustBeNonNegative reports whether a checkpoint tensor is a running mean
// of squares (Adam's exp_avg_sq, AMSGrad's max_exp_avg_sq): Adam takes its
// square root; or a batch norm's running variance (PyTorch's name), whose
// square root eval mode takes: a negative one loaded without a word, and
// every prediction in eval mode was NaN.
func mustBeNonNegative(name string) bool {
	return strings.HasPrefix(name, OptimizerPrefix) &&
		(strings.HasSuffix(name, ".exp_avg_sq") || strings.HasSuffix(name, ".max_exp_avg_sq")) ||
		strings.HasSuffix(name, ".running_var")
}

// negative is the index of the first value below zero in d (-0 is not),
// or -1.
func negative(d []byte, dt DType) int {
	switch dt {
	case F32:
		for k := 0; k+4 <= len(d); k += 4 {
			if d[k+3]&0x80 != 0 && (d[k]|d[k+1]|d[k+2]|d[k+3]&0x7f) != 0 {
				return k / 4
			}
		}
	case F64:
		for k := 0; k+8 <= len(d); k += 8 {
			if d[k+7]&0x80 != 0 && (d[k]|d[k+1]|d[k+2]|d[k+3]|d[k+4]|d[k+5]|d[k+6]|d[k+7]&0x7f) != 0 {
				return k / 8
			}
		}
	}
	return -1
}

// isBatchCounter reports whether a tensor the model lacks is PyTorch's
// batch norm counter, a 64-bit integer scalar (or one element, as
// numpy's ascontiguousarray in scripts/safetensors_io.py writes it) that
// ngen may skip;
// anything else under that name is not from PyTorch.
func isBatchCounter(name, dtype string, shape []int64) bool {
	return strings.HasSuffix(name, ".num_batches_tracked") && dtype == "I64" && (len(shape) == 0 || slices.Equal(shape, []int64{1}))
}
