package codegen

import (
	"fmt"
	"math"
	"reflect"
	"sort"

	"github.com/dave/jennifer/jen"

	"github.com/ngen-ml/ngen/runtime"
)

// The Go glue embeds the whole runtime.Plan as a composite literal. This
// file turns any plan-shaped value into jennifer code by reflection, so
// the literal follows the Plan type as it changes.

// constNames spells the runtime's enum values by their constant names in
// the plan literal. Keys are typed values, so a renumbering in runtime
// cannot make a name lie; an unlisted value prints as a conversion.
var constNames = map[any]string{
	runtime.F32: "F32", runtime.F64: "F64", runtime.I32: "I32",
	runtime.Arena: "Arena", runtime.Persistent: "Persistent", runtime.Alias: "Alias",
	runtime.LaunchStep: "LaunchStep", runtime.GemmStep: "GemmStep", runtime.MemsetStep: "MemsetStep", runtime.CopyStep: "CopyStep",
	runtime.ArgPtr: "ArgPtr", runtime.ArgI32: "ArgI32", runtime.ArgI64: "ArgI64", runtime.ArgU64: "ArgU64", runtime.ArgF32: "ArgF32", runtime.ArgF64: "ArgF64",
}

// literal renders a value as Go source: structs as keyed composite
// literals of their named type without zero fields, slices, arrays and maps
// (keys sorted) as composite literals, named numbers as their constant or a
// conversion, floats exactly (Inf and NaN through package math).
func literal(v reflect.Value) (jen.Code, error) {
	t := v.Type()
	if t.PkgPath() != "" && t.Kind() <= reflect.Complex128 { // a named bool or number
		if name, ok := constNames[v.Interface()]; ok {
			return jen.Qual(t.PkgPath(), name), nil
		}
	}
	switch v.Kind() {
	case reflect.Struct:
		if t.Name() == "" {
			return nil, fmt.Errorf("no literal for anonymous %s", t)
		}
		d, err := fields(v)
		if err != nil {
			return nil, err
		}
		return jen.Add(typeCode(t)).Values(d), nil
	case reflect.Pointer:
		if v.IsNil() {
			return jen.Nil(), nil
		}
		if v.Elem().Kind() != reflect.Struct {
			return nil, fmt.Errorf("no literal for %s", t)
		}
		e, err := literal(v.Elem())
		return jen.Op("&").Add(e), err
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return jen.Nil(), nil
		}
		var items []jen.Code
		for i := 0; i < v.Len(); i++ {
			e, err := elem(v.Index(i))
			if err != nil {
				return nil, err
			}
			items = append(items, e)
		}
		tc, err := typeExpr(t)
		if err != nil {
			return nil, err
		}
		return jen.Add(tc).Values(items...), nil
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		d := jen.Dict{}
		for _, k := range keys {
			kc, err := literal(k)
			if err != nil {
				return nil, err
			}
			vc, err := elem(v.MapIndex(k))
			if err != nil {
				return nil, err
			}
			d[kc] = vc
		}
		tc, err := typeExpr(t)
		if err != nil {
			return nil, err
		}
		return jen.Add(tc).Values(d), nil
	}
	var c jen.Code
	switch v.Kind() {
	case reflect.String:
		c = jen.Lit(v.String())
	case reflect.Bool:
		c = jen.Lit(v.Bool())
	case reflect.Float32, reflect.Float64:
		c = floatLit(v.Float())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		c = jen.Lit(int(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		c = jen.Lit(int(v.Uint()))
		if v.Uint() > math.MaxInt64 {
			c = jen.Op(fmt.Sprint(v.Uint()))
		}
	default:
		return nil, fmt.Errorf("no literal for %s", t)
	}
	if t.PkgPath() != "" {
		// A named type without a listed constant: a conversion keeps it
		// readable as what it is, e.g. runtime.DType(7).
		return jen.Add(typeCode(t)).Call(c), nil
	}
	return c, nil
}

func fields(v reflect.Value) (jen.Dict, error) {
	d := jen.Dict{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		if !t.Field(i).IsExported() || v.Field(i).IsZero() {
			continue
		}
		c, err := literal(v.Field(i))
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", t.Name(), t.Field(i).Name, err)
		}
		d[jen.Id(t.Field(i).Name)] = c
	}
	return d, nil
}

// elem renders an element of a slice, array or map, leaving out the type
// of struct elements as Go allows.
func elem(v reflect.Value) (jen.Code, error) {
	if v.Kind() == reflect.Struct {
		d, err := fields(v)
		return jen.Values(d), err
	}
	return literal(v)
}

func floatLit(f float64) jen.Code {
	switch {
	case math.IsNaN(f):
		return jen.Qual("math", "NaN").Call()
	case math.IsInf(f, 1):
		return jen.Qual("math", "Inf").Call(jen.Lit(1))
	case math.IsInf(f, -1):
		return jen.Qual("math", "Inf").Call(jen.Lit(-1))
	}
	return jen.Lit(f)
}

func typeCode(t reflect.Type) jen.Code {
	if t.PkgPath() != "" {
		return jen.Qual(t.PkgPath(), t.Name())
	}
	return jen.Id(t.Name())
}

// typeExpr spells a type: named, slice, array or map of spellable types.
func typeExpr(t reflect.Type) (jen.Code, error) {
	if t.Name() != "" {
		return typeCode(t), nil
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Pointer:
		e, err := typeExpr(t.Elem())
		if err != nil {
			return nil, err
		}
		switch t.Kind() {
		case reflect.Slice:
			return jen.Index().Add(e), nil
		case reflect.Array:
			return jen.Index(jen.Lit(t.Len())).Add(e), nil
		case reflect.Pointer:
			return jen.Op("*").Add(e), nil
		}
		k, err := typeExpr(t.Key())
		if err != nil {
			return nil, err
		}
		return jen.Map(k).Add(e), nil
	}
	return nil, fmt.Errorf("no type expression for %s", t)
}
