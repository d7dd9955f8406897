package mlp_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
)

// TestNilAndZeroModel: MemStats, ResetPeak and other methods of a nil
// *Model or a zero Model panicked (issue 13). Every exported method is
// called, by reflection so that a method added later is covered too, with
// zero arguments: none panics, each with an error result returns one that
// says the model was not made by New, and the others return zero values.
func TestNilAndZeroModel(t *testing.T) {
	for name, m := range map[string]*mlp.Model{"nil": nil, "zero": {}} {
		v := reflect.ValueOf(m)
		ty := v.Type()
		if ty.NumMethod() < 15 {
			t.Fatalf("only %d methods", ty.NumMethod())
		}
		errType := reflect.TypeOf((*error)(nil)).Elem()
		for i := 0; i < ty.NumMethod(); i++ {
			meth := ty.Method(i)
			var args []reflect.Value
			for j := 1; j < meth.Type.NumIn(); j++ {
				args = append(args, reflect.Zero(meth.Type.In(j)))
			}
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s Model: %s panics: %v", name, meth.Name, r)
					}
				}()
				out := v.Method(i).Call(args)
				for k, o := range out {
					if meth.Type.Out(k) == errType {
						err, _ := o.Interface().(error)
						if err == nil || !strings.Contains(err.Error(), "mlp."+meth.Name+":") || !strings.Contains(err.Error(), "mlp.New") {
							t.Errorf("%s Model: %s: err = %v", name, meth.Name, err)
						}
						continue
					}
					if !o.IsZero() {
						t.Errorf("%s Model: %s returns %v, not its zero value", name, meth.Name, o)
					}
				}
			}()
		}
	}
}
