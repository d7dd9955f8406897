package codegen

// TEMPORARY (lead): placeholder until codegen/goglue.go lands; delete this
// file then.

import "github.com/ngen-ml/ngen/runtime"

type GlueOptions struct {
	Package, Source, CUFile, EntrySymbol string
	HasPTX                               bool
}

func GoGlue(p *runtime.Plan, opts GlueOptions) ([]byte, error) { return nil, nil }
