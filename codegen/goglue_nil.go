package codegen

import (
	"github.com/dave/jennifer/jen"
)

// A nil *Model, or a zero Model not made by New, has no session: without a
// check, every method would dereference nil and panic (issue 13). Each
// exported method therefore starts with m.lock, which fails on such a
// model before touching it. Methods with an error result return that
// error; the others, whose signatures have no error, return their zero
// value (Train and Eval do nothing, Training and ResetPeak are false,
// Params is nil, MemStats is zero, Session is nil), as their doc says.

// lockHelper emits Model.lock, which takes the mutex of a usable model.
func (g *glue) lockHelper(f *jen.File) {
	f.Comment("lock takes the model's mutex for method; it fails, holding nothing, on a")
	f.Comment("nil *Model or a zero Model, which New did not make.")
	recv(f).Id("lock").Params(jen.Id("method").String()).Error().Block(
		jen.If(jen.Id("m").Op("==").Nil()).Block(
			jen.Return(jen.Qual("fmt", "Errorf").Call(jen.Lit(g.pkg+".%s: the *Model is nil, not made by New (use "+g.pkg+".New)"), jen.Id("method")))),
		jen.Id("m").Dot("mu").Dot("Lock").Call(),
		jen.If(ms().Op("==").Nil()).Block(
			jen.Id("m").Dot("mu").Dot("Unlock").Call(),
			jen.Return(jen.Qual("fmt", "Errorf").Call(jen.Lit(g.pkg+".%s: the Model was not made by New (use "+g.pkg+".New)"), jen.Id("method")))),
		jen.Return(jen.Nil()),
	)
}

// guarded prefixes a method body with m.lock: on failure the method
// returns zeros followed by the error when withErr, else zeros alone (a
// bare return when there are none).
func guarded(method string, withErr bool, zeros []jen.Code, body ...jen.Code) []jen.Code {
	var fail jen.Code
	if withErr {
		fail = jen.If(jen.Err().Op(":=").Id("m").Dot("lock").Call(jen.Lit(method)), jen.Err().Op("!=").Nil()).Block(
			jen.Return(append(append([]jen.Code{}, zeros...), jen.Err())...))
	} else {
		fail = jen.If(jen.Id("m").Dot("lock").Call(jen.Lit(method)).Op("!=").Nil()).Block(jen.Return(zeros...))
	}
	return append([]jen.Code{fail, jen.Defer().Id("m").Dot("mu").Dot("Unlock").Call()}, body...)
}

// errBody and plainBody are guarded for the two kinds of signature.
func errBody(method string, zeros []jen.Code, body ...jen.Code) []jen.Code {
	return guarded(method, true, zeros, body...)
}

func plainBody(method string, zeros []jen.Code, body ...jen.Code) []jen.Code {
	return guarded(method, false, zeros, body...)
}
