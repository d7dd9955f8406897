package dsl

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestHostileDeclarations keeps the declarations of issue 27's second
// hostile pass (docs/HOSTILE.md) that built without a word: options given
// twice or that the layer does not read, parameters that leave no
// finite number in f32, a LayerNorm eps or a dropout of NaN, rates every
// session refuses. Each is now an error at the user's line.
func TestHostileDeclarations(t *testing.T) {
	seq := func(m *Model) *Tensor { return m.Embedding("emb", m.Tokens("ids", Batch, 6), 10, 8, F32) }
	img := func(m *Model) *Tensor { return m.Input("x", F32, Batch, 3, 8, 8) }
	vec := func(m *Model) *Tensor { return m.Input("x", F32, Batch, 8) }
	for _, c := range []struct {
		name  string
		build func(m *Model) int // the line of the call that must fail
		want  string
	}{
		{"conv two options", func(m *Model) int {
			x := img(m)
			l := line() + 1
			m.Conv2d("c", x, 4, 3, Conv{}, Conv{Stride: 2})
			return l
		}, "conv2d (dsl/hostile_test.go:%d): 2 dsl.Conv values given"},
		{"maxpool two options", func(m *Model) int {
			x := img(m)
			l := line() + 1
			MaxPool2d(x, 2, Pool{}, Pool{Stride: 5})
			return l
		}, "maxpool2d (dsl/hostile_test.go:%d): 2 dsl.Pool values given"},
		{"avgpool negative dilation", func(m *Model) int {
			x := img(m)
			l := line() + 1
			AvgPool2d(x, 2, Pool{Dilation: -1})
			return l
		}, "avgpool (dsl/hostile_test.go:%d): AvgPool2d has no dilation"},
		{"batchnorm two options", func(m *Model) int {
			x := img(m)
			l := line() + 1
			m.BatchNorm2d("bn", x, BatchNorm{}, BatchNorm{Eps: 1})
			return l
		}, "batchnorm2d (dsl/hostile_test.go:%d): 2 dsl.BatchNorm values given"},
		{"rnn two options", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.RNN("r", x, 8, Recurrent{BatchFirst: true}, Recurrent{})
			return l
		}, "rnn (dsl/hostile_test.go:%d): 2 dsl.Recurrent values given"},
		{"rnn given C0", func(m *Model) int {
			x := seq(m)
			c0 := m.Input("c0", F32, 1, Batch, 8)
			l := line() + 1
			m.RNN("r", x, 8, Recurrent{BatchFirst: true, C0: c0})
			return l
		}, "rnn (dsl/hostile_test.go:%d): r: C0 is the LSTM's cell state"},
		{"lstm given a nonlinearity", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.LSTM("l", x, 8, Recurrent{BatchFirst: true, Nonlinearity: "relu"})
			return l
		}, `lstm (dsl/hostile_test.go:%d): l: nonlinearity "relu": an LSTM's gates are fixed`},
		{"attention two options", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.MultiheadAttention("a", x, x, x, 2, Attention{}, Attention{Causal: true})
			return l
		}, "multihead_attention (dsl/hostile_test.go:%d): 2 dsl.Attention values given"},
		{"attention dropout NaN", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.MultiheadAttention("a", x, x, x, 2, Attention{Dropout: math.NaN()})
			return l
		}, "multihead_attention (dsl/hostile_test.go:%d): a: dropout NaN outside [0, 1)"},
		{"decoder-only block dropout NaN", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.DecoderOnlyBlock("d", x, 2, 8, math.NaN())
			return l
		}, "(dsl/hostile_test.go:%d): d.self_attn: dropout NaN outside [0, 1)"},
		{"positional encoding dropout NaN", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.PositionalEncoding("pe", x, 6, math.NaN())
			return l
		}, "dropout (dsl/hostile_test.go:%d): p must be in [0, 1), got NaN"},
		{"layernorm eps -1", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.LayerNorm("ln", x, -1)
			return l
		}, "layernorm (dsl/hostile_test.go:%d): ln: eps -1 must be positive and finite"},
		{"layernorm eps NaN", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.LayerNorm("ln", x, math.NaN())
			return l
		}, "layernorm (dsl/hostile_test.go:%d): ln: eps NaN must be positive and finite"},
		{"layernorm two eps", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.LayerNorm("ln", x, 1e-5, 1e-3)
			return l
		}, "layernorm (dsl/hostile_test.go:%d): ln: 2 eps values given"},
		{"encoder layer eps -1", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.TransformerEncoderLayer("enc", x, 2, TransformerOptions{DimFeedforward: 8, LayerNormEps: -1})
			return l
		}, "layernorm (dsl/hostile_test.go:%d): enc.norm1: eps -1 must be positive and finite"},
		{"encoder layer given a target mask", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.TransformerEncoderLayer("enc", x, 2, TransformerOptions{DimFeedforward: 8}, Masks{TgtCausal: true})
			return l
		}, "transformer_encoder_layer (dsl/hostile_test.go:%d): TgtCausal, TgtKeyPadding and MemoryKeyPadding mask a decoder's attention"},
		{"decoder layer given a source mask", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.TransformerDecoderLayer("dec", x, x, 2, TransformerOptions{DimFeedforward: 8}, Masks{SrcCausal: true})
			return l
		}, "transformer_decoder_layer (dsl/hostile_test.go:%d): SrcCausal and SrcKeyPadding mask an encoder's attention"},
		{"encoder layer two masks", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.TransformerEncoderLayer("enc", x, 2, TransformerOptions{DimFeedforward: 8}, Masks{}, Masks{SrcCausal: true})
			return l
		}, "transformer_encoder_layer (dsl/hostile_test.go:%d): 2 dsl.Masks values given"},
		{"f32 param const 1e300", func(m *Model) int {
			l := line() + 1
			m.Param("p", F32, Const(1e300), 8)
			return l
		}, "param (dsl/hostile_test.go:%d): p: initialiser const(1e+300, 0) is beyond the range of f32"},
		{"f32 param uniform ±1e39", func(m *Model) int {
			l := line() + 1
			m.Param("p", F32, Uniform(-1e39, 1e39), 8)
			return l
		}, "param (dsl/hostile_test.go:%d): p: initialiser uniform(-1e+39, 1e+39) is beyond the range of f32"},
		{"f32 scale 1e300", func(m *Model) int {
			x := vec(m)
			l := line() + 1
			Scale(x, 1e300)
			return l
		}, "scale (dsl/hostile_test.go:%d): argument 1e+300 is beyond the range of f32"},
		{"sgd rate above MaxLR", func(m *Model) int {
			l := line() + 1
			m.Optimizer(SGD{LR: 1e39})
			return l
		}, "sgd (dsl/hostile_test.go:%d): learning rate 1e+39 exceeds runtime.MaxLR"},
		{"group rate above MaxLR", func(m *Model) int {
			l := line() + 1
			m.Optimizer(SGD{LR: 0.1, Groups: []ParamGroup{{Names: []string{"*"}, LRScale: 1e40}}})
			return l
		}, "sgd (dsl/hostile_test.go:%d): parameter group 0: learning rate 0.1 × LRScale 1e+40 exceeds runtime.MaxLR"},
		{"adamw decay and no decay", func(m *Model) int {
			l := line() + 1
			m.Optimizer(AdamW{LR: 0.1, WeightDecay: 0.1, NoWeightDecay: true})
			return l
		}, "adamw (dsl/hostile_test.go:%d): NoWeightDecay with a WeightDecay"},
		{"sum axis -3 of rank 2", func(m *Model) int {
			x := vec(m)
			l := line() + 1
			Sum(x, false, -3)
			return l
		}, "sum (dsl/hostile_test.go:%d): axis -3 out of range for rank 2"},
		{"param named __metadata__", func(m *Model) int {
			l := line() + 1
			m.Param("__metadata__", F32, Const(0), 8)
			return l
		}, `param (dsl/hostile_test.go:%d): name "__metadata__" is a checkpoint's own key`},
		{"state named like optimizer state", func(m *Model) int {
			l := line() + 1
			m.State("__optimizer__.fc.weight.exp_avg", F32, Const(0), 8)
			return l
		}, `state (dsl/hostile_test.go:%d): name "__optimizer__.fc.weight.exp_avg" is a checkpoint's own key`},
		{"stack of unequal shapes", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			Stack(1, x, Slice(x, 1, 0, 3))
			return l
		}, "stack (dsl/hostile_test.go:%d): operand 1 f32[B,3,8] differs from operand 0 f32[B,6,8]"},
		{"checkpoint returns another model's tensor", func(m *Model) int {
			o := NewModel("other")
			z := o.Input("z", F32, Batch, 8)
			l := line() + 1
			m.Checkpoint(func() *Tensor { return z })
			return l
		}, "checkpoint (dsl/hostile_test.go:%d): the function returned a tensor of another model"},
		// A zero Tensor (new(dsl.Tensor), made by no model) panicked with
		// a nil model; now it is nil to every op.
		{"zero tensor to a package op", func(m *Model) int {
			vec(m)
			l := line() + 1
			m.Linear("fc", ReLU(new(Tensor)), 4)
			return l
		}, "linear (dsl/hostile_test.go:%d): fc: the input is nil"},
		{"zero tensor as an argument", func(m *Model) int {
			x := vec(m)
			l := line() + 1
			Add(x, new(Tensor))
			return l
		}, "add (dsl/hostile_test.go:%d): argument 1 is nil"},
		{"zero tensor to a layer", func(m *Model) int {
			l := line() + 1
			m.LayerNorm("ln", new(Tensor))
			return l
		}, "layernorm (dsl/hostile_test.go:%d): ln: the input is nil"},
		{"zero tensor as attention key", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.MultiheadAttention("a", x, new(Tensor), x, 2)
			return l
		}, "multihead_attention (dsl/hostile_test.go:%d): a: the key is nil"},
		{"zero tensor as an initial state", func(m *Model) int {
			x := seq(m)
			l := line() + 1
			m.LSTM("l", x, 8, Recurrent{BatchFirst: true, H0: new(Tensor)})
			return l
		}, "lstm (dsl/hostile_test.go:%d): l: an initial state or the mask is a zero dsl.Tensor"},
		{"zero tensor as output", func(m *Model) int {
			l := line() + 1
			m.Output(new(Tensor))
			return l
		}, "output (dsl/hostile_test.go:%d): the tensor is nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewModel("hostile")
			l := c.build(m)
			want := fmt.Sprintf(c.want, l)
			if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want %q", err, want)
			}
		})
	}
	// A zero Tensor through every package-level op: nil, no panic.
	z := new(Tensor)
	for name, got := range map[string]*Tensor{
		"ReLU": ReLU(z), "Scale": Scale(z, 2), "Add": Add(z, z), "MatMul": MatMul(z, z), "Sum": Sum(z, false),
		"Reshape": Reshape(z, Batch), "Dropout": Dropout(z, 0.5), "CrossEntropy": CrossEntropy(z, z),
		"Permute": Permute(z, 0), "Slice": Slice(z, 0, 0, 1), "Select": Select(z, 0, 0), "Concat": Concat(0, z, z),
		"Stack": Stack(0, z, z), "BatchMatMul": BatchMatMul(z, z, false, false), "Softmax": Softmax(z, 0),
		"MaskedSoftmax": MaskedSoftmax(z, true, nil), "Embed": Embed(z, z), "MaxPool2d": MaxPool2d(z, 2),
		"AvgPool2d": AvgPool2d(z, 2), "Flatten": Flatten(z),
	} {
		if got != nil {
			t.Errorf("%s of a zero Tensor = %v, want nil", name, got.Shape())
		}
	}
}
