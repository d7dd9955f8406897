package convnet

// The seed ConvNet under bf16 mixed precision, for cmd/train -amp bf16:
// ngen build -amp puts the same declaration (ConvNet, model.go) under
// dsl.AMP{Type: dsl.BF16} (no loss scaling). Fused only, as the MLP's
// (models/mlp/amp.go): fused and -fuse=none agree bit for bit
// (codegen/jit's TestAMPConvOracle). ConvNetBN and fp16 have no build
// here: each generated package adds to every build and to the suites
// that run every registered model (docs/AMP.md).
//
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -model convnet -amp bf16 -suffix=_bf16 model.go
