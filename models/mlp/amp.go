package mlp

// The seed MLP under mixed precision, for cmd/train -amp: ngen build -amp
// puts the same declaration (MLP, model.go) under dsl.AMP with its
// defaults, bf16 without loss scaling and fp16 with GradScaler's. Only the
// fused build is generated: fused and -fuse=none AMP training agree bit
// for bit (codegen/jit's TestAMPMLPOracle), and the GPU backend cannot
// run a 16-bit GEMM yet, so an _unfused pair would only add a package the
// GPU suite must skip (docs/AMP.md).
//
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -model mlp -amp bf16 -suffix=_bf16 model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -model mlp -amp fp16 -suffix=_fp16 model.go
