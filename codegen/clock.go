package codegen

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
)

// The clock kernel (runtime.ClockKernel; the layout is runtime/clock.go's):
// one thread, the last launch of a guarded step. After a good step it
// advances the clock as the host advances its mirrors (Session.trainStep:
// the update check's bound, afterUpdate; the counters; the scaler,
// finiteStep), then computes the next step's scalars as the host's
// Optimizer.ScalarsAt and gsafe do, with schedule.Rate ported to C. A
// failed or skipped step leaves the clock alone: the host, which decides
// what such a step means (an error, a skip, a peer's verdict), rewrites
// it (Session.syncClock).

// clockSlot renders the clock word of a next-step scalar for kernel k, or
// "" when the plan has no clock or the clock does not hold name.
func (k *kernel) clockSlot(name, ctype string) string {
	if k.plan == nil {
		return ""
	}
	cb := k.plan.ClockBuffer()
	if cb < 0 {
		return ""
	}
	slot := runtime.ClockSlot(k.plan.Optimizer, name)
	if slot < 0 {
		return ""
	}
	clk := k.param("const double *__restrict__", "clk", runtime.ArgRef{Buf: cb, Kind: runtime.ArgPtr})
	local := "s_" + compiler.Sanitize(name)
	if _, ok := k.byName["clock "+local]; !ok {
		k.byName["clock "+local] = -1
		k.pro = append(k.pro, fmt.Sprintf("  const %s %s = (%s)%s[%d]; // from the clock\n", ctype, local, ctype, clk, slot))
	}
	return local
}

// dlit is x as a C double literal that parses back to x.
func dlit(x float64) string {
	s := strconv.FormatFloat(x, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

// clockKernel renders the clock kernel into k.
func clockKernel(k *kernel, plan *runtime.Plan, st *runtime.Step) error {
	o := plan.Optimizer
	if st.Src < 0 || st.Src >= len(plan.Buffers) || plan.Buffers[st.Src].Role != "clock" {
		return fmt.Errorf("internal error: clock step without its clock")
	}
	if o.Kind != "adam" && o.Kind != "adamw" && o.Kind != "sgd" {
		return fmt.Errorf("internal error: clock of optimizer %q", o.Kind)
	}
	k.name = "ngen_clock"
	k.comment = []string{"after a good step: the step counters, the loss scaler and the update check's bound advance;",
		"then the next step's scalars (the scheduled rate, Adam's bias corrections, the loss scale, gsafe)"}
	k.gridStride = false
	k.block = [3]int{1, 1, 1}
	k.grid = [3]runtime.Expr{{Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
	sb := k.param("const int *", "status", runtime.ArgRef{Buf: st.Buf, Kind: runtime.ArgPtr})
	c := k.param("double *", "clk", runtime.ArgRef{Buf: st.Src, Kind: runtime.ArgPtr})
	adv := k.imm(1)
	boundOn := false
	for _, f := range plan.Funcs {
		for _, s := range f.Steps {
			if s.Builtin == runtime.UpdateCheckKernel {
				boundOn = true
			}
		}
	}
	rules := o.Rules()
	f32 := plan.DType != runtime.F64
	slot := func(name string) string { return fmt.Sprintf("%s[%d]", c, runtime.ClockSlot(o, name)) }
	// File-scope helpers ($K_ is the kernel's name): plain functions, no
	// lambdas, which NVRTC's default dialect lacks.
	var pre strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&pre, format+"\n", a...) }
	word := func(i int) string { return fmt.Sprintf("%s[%d]", c, i) }
	const slack = "9.5367431640625e-07" // runtime/update_bound.go's boundSlack, 2^-20
	writeRate(&pre, c)
	// The bound (update_bound.go's nextGroup for every group, then the
	// largest), from the bound in the clock and the step's scalars in
	// the clock, for a gradient of magnitude g.
	if boundOn {
		top, lim := math.MaxFloat32, math.MaxFloat32/2
		if !f32 {
			top, lim = math.MaxFloat64, math.MaxFloat64/2
		}
		top /= 1 + 8*0x1p-20 // as update_bound.go's nextGroup
		eps := o.Eps
		if f32 {
			eps = float64(float32(eps))
		}
		p("// One rounded operation's bound, which must stay below the type's range.")
		p("static __device__ double $K_r(bool *ok, double x) { x = x * (1.0 + %s); if (!(x <= %s)) *ok = false; return x; }", slack, dlit(top))
		p("// A constant or scalar as the kernels hold it.")
		p("static __device__ double $K_c(double x) { return fabs(x) * (1.0 + %s); }", slack)
		p("// The bound after an update with gradients of magnitude at most g (false: none).")
		p("static __device__ bool $K_next(const double *%s, double g, double *nb) {", c)
		p("  bool ok = true;")
		p("  nb[0] = nb[1] = nb[2] = 0.0;")
		for _, r := range rules {
			sc := func(name string) string { return slot(name + r.Suffix) }
			p("  { // parameter group %q", r.Suffix)
			p("    double bp = %s, b1 = %s, b2 = %s;", word(runtime.ClockBound), word(runtime.ClockBound+1), word(runtime.ClockBound+2))
			switch o.Kind {
			case "adam", "adamw":
				if o.Kind == "adam" {
					p("    const double gd = $K_r(&ok, g + $K_r(&ok, bp * $K_c(%s)));", sc("wd"))
				} else {
					p("    const double gd = g;")
				}
				p("    b1 = $K_r(&ok, $K_r(&ok, b1 * $K_c(%s)) + $K_r(&ok, gd * $K_c(%s)));", dlit(r.Beta1), dlit(1-r.Beta1))
				p("    b2 = $K_r(&ok, $K_r(&ok, b2 * $K_c(%s)) + $K_r(&ok, $K_r(&ok, gd * gd) * $K_c(%s)));", dlit(r.Beta2), dlit(1-r.Beta2))
				p("    $K_r(&ok, $K_r(&ok, sqrt(b2)) / (fabs(%s) * %s));", sc("bc2_sqrt"), dlit(1-2*0x1p-20))
				if eps < map[bool]float64{true: 0x1p-126, false: 0x1p-1022}[f32] {
					p("    return false; // an eps the kernels may flush to zero")
				} else {
					p("    const double ratio = $K_r(&ok, b1 / (%s * %s));", dlit(eps), dlit(1-4*0x1p-20))
					p0 := "bp"
					if o.Kind == "adamw" {
						p0 = fmt.Sprintf("$K_r(&ok, bp * $K_c(%s))", sc("decay"))
					}
					p("    bp = $K_r(&ok, %s + $K_r(&ok, $K_c(%s) * ratio));", p0, sc("step_size"))
				}
			case "sgd":
				p("    double d = $K_r(&ok, g + $K_r(&ok, bp * $K_c(%s)));", sc("wd"))
				if r.Momentum != 0 {
					p("    b1 = $K_r(&ok, $K_r(&ok, $K_c(%s) * b1) + $K_r(&ok, $K_c(%s) * d));", sc("mom"), sc("damp"))
					if o.Nesterov {
						p("    d = $K_r(&ok, d + $K_r(&ok, b1 * $K_c(%s)));", dlit(r.Momentum))
					} else {
						p("    d = b1;")
					}
				}
				p("    bp = $K_r(&ok, bp + $K_r(&ok, $K_c(%s) * d));", sc("lr"))
			}
			p("    nb[0] = fmax(nb[0], bp); nb[1] = fmax(nb[1], b1); nb[2] = fmax(nb[2], b2);")
			p("  }")
		}
		p("  return ok;")
		p("}")
		p("// Whether the bound after an update with gradients of magnitude at most g is within the limit.")
		p("static __device__ bool $K_safe(const double *%s, double g) {", c)
		p("  double nb[3];")
		p("  return $K_next(%s, g, nb) && nb[0] <= %s && nb[1] <= %s && nb[2] <= %s;", c, dlit(lim), dlit(lim), dlit(lim))
		p("}")
	}
	k.pre = pre.String()
	w := &k.body
	p = func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	p("  if (blockIdx.x != 0 || threadIdx.x != 0) return;")
	if boundOn {
		p("  const double S = %s; // runtime/update_bound.go's boundSlack, 2^-20", slack)
	}
	// Advance after a good step (stepBad's words clear).
	p("  if (%s && !(%s)) {", adv, stepBad(sb))
	if boundOn {
		p("    // The bound after this step (afterUpdate): the update check's maxima when it checked every")
		p("    // element, else next's bound at the guard's largest gradient, unscaled and clipped.")
		p("    if (%s[%d] != 0) {", sb, 12)
		for j := range 3 {
			p("      %s = (double)__int_as_float(%s[%d]) * (1.0 + S) * (1.0 + S) * (1.0 + S) * (1.0 + S);", word(runtime.ClockBound+j), sb, 9+j)
		}
		p("    } else {")
		p("      double g = (double)__int_as_float(%s[8]);", sb)
		p("      if (%s != 0.0) g = (g * (double)(float)(1.0 / %s)) * (1.0 + S);", word(runtime.ClockScaler), word(runtime.ClockScale))
		if o.ClipValue > 0 {
			p("      if (!(g <= %s)) g = %s;", dlit(o.ClipValue), dlit(o.ClipValue))
		}
		p("      double nb[3];")
		p("      if ($K_next(%s, g, nb))", c)
		p("         { %s = nb[0]; %s = nb[1]; %s = nb[2]; }", word(runtime.ClockBound), word(runtime.ClockBound+1), word(runtime.ClockBound+2))
		p("      else { %s = %s = %s = __longlong_as_double(0x7ff0000000000000LL); } // +Inf: check every element from now on", word(runtime.ClockBound), word(runtime.ClockBound+1), word(runtime.ClockBound+2))
		p("    }")
	}
	p("    %s += 1.0;\n    %s += 1.0;", word(runtime.ClockT), word(runtime.ClockU))
	p("    if (%s != 0.0) { // the scaler's growth (finiteStep)", word(runtime.ClockScaler))
	p("      if (%s + 1.0 < %s) %s += 1.0;", word(runtime.ClockTracker), word(runtime.ClockInterval), word(runtime.ClockTracker))
	p("      else {")
	p("        const float g = (float)(%s * %s);", word(runtime.ClockScale), word(runtime.ClockGrowth))
	p("        if ((__float_as_int(g) & 0x7fffffff) != 0x7f800000) %s = (double)g;", word(runtime.ClockScale))
	p("        %s = 0.0;", word(runtime.ClockTracker))
	p("      }")
	p("    }")
	// A step the scaler skips (Session.check's errSkip: no failed op, the
	// loss or a gradient not finite, or a peer's) backs the scale off and
	// counts a schedule step, as skipStep does on the host, so that a
	// session that reads the status a step late (Session.SetPipelined)
	// launches the next step at the backed-off scale; a synchronous one
	// rewrites the same words (markClock).
	p("  } else if (%s && %s != 0.0 && %s[0] == 0 && %s[5] != 4 && (%s[4] != 0 || %s[5] == 1 || %s[5] == 5)) { // the scaler's backoff (skipStep)",
		adv, word(runtime.ClockScaler), sb, sb, sb, sb, sb)
	p("    %s += 1.0;", word(runtime.ClockU))
	p("    %s = (double)(float)(%s * %s);", word(runtime.ClockScale), word(runtime.ClockScale), word(runtime.ClockBackoff))
	p("    %s = 0.0;", word(runtime.ClockTracker))
	p("  }")
	// The next step's scalars.
	p("  const double t = %s + 1.0; // the next step, from 1", word(runtime.ClockT))
	p("  const long long e = (long long)%s; // the schedule's epoch: its steps so far", word(runtime.ClockU))
	p("  %s = t;", slot("step"))
	p("  %s = %s;", slot(runtime.LossScaleScalar), word(runtime.ClockScale))
	p("  %s = (double)(float)(1.0 / %s);", slot(runtime.InvScaleScalar), word(runtime.ClockScale))
	for _, r := range rules {
		sc := func(name string) string { return slot(name + r.Suffix) }
		p("  { // parameter group %q", r.Suffix)
		p("    const double lr = $K_rate(%s, %s * %s, e);", c, word(runtime.ClockBase), dlit(r.LRScale))
		wd := word(runtime.ClockWD)
		if r.OwnDecay {
			wd = dlit(r.WeightDecay)
		}
		p("    %s = lr;", sc("lr"))
		switch o.Kind {
		case "adam", "adamw":
			p("    %s = lr / (1.0 - pow(%s, t));", sc("step_size"), dlit(r.Beta1))
			p("    %s = sqrt(1.0 - pow(%s, t));", sc("bc2_sqrt"), dlit(r.Beta2))
			if o.Kind == "adamw" {
				p("    %s = 1.0 - lr * %s;", sc("decay"), wd)
			} else {
				p("    %s = %s;", sc("wd"), wd)
			}
		case "sgd":
			p("    %s = %s;", sc("wd"), wd)
			p("    %s = t == 1.0 ? 0.0 : %s; // torch starts the momentum buffer at the first gradient", sc("mom"), dlit(r.Momentum))
			p("    %s = t == 1.0 ? 1.0 : %s;", sc("damp"), dlit(1-o.Dampening))
		}
		p("  }")
	}
	if !boundOn {
		return nil
	}
	// gsafe (update_bound.go's gsafe, then loss_scale.go's scaledGSafe).
	p("  double gs = -1.0;")
	p("  if (%s == 0.0 && $K_safe(clk, 0.0)) {", word(runtime.ClockBoundOff))
	if o.ClipValue > 0 {
		p("    if ($K_safe(clk, %s)) gs = __longlong_as_double(0x7ff0000000000000LL); else { // +Inf: every clamped gradient is safe", dlit(o.ClipValue))
	} else {
		p("    {")
	}
	if f32 {
		// The check compares in float: the largest float the bound
		// allows, which is the largest double it allows rounded down
		// (safe is monotone), in 31 halvings instead of 63.
		p("      // Binary search over the bits of non-negative floats, whose order is the values'.")
		p("      int lo = 0, hi = 0x7f7fffff;")
		p("      if ($K_safe(clk, (double)__int_as_float(hi))) lo = hi;")
		p("      while (lo < hi) {")
		p("        const int mid = lo + (hi - lo + 1) / 2;")
		p("        if ($K_safe(clk, (double)__int_as_float(mid))) lo = mid; else hi = mid - 1;")
		p("      }")
		p("      gs = (double)__int_as_float(lo);")
	} else {
		p("      // Binary search over the bits of non-negative doubles, whose order is the values'.")
		p("      unsigned long long lo = 0, hi = (unsigned long long)__double_as_longlong(1.7976931348623157e+308);")
		p("      if ($K_safe(clk, 1.7976931348623157e+308)) lo = hi;")
		p("      while (lo < hi) {")
		p("        const unsigned long long mid = lo + (hi - lo + 1) / 2;")
		p("        if ($K_safe(clk, __longlong_as_double((long long)mid))) lo = mid; else hi = mid - 1;")
		p("      }")
		p("      gs = __longlong_as_double((long long)lo);")
	}
	p("    }")
	p("  }")
	p("  if (%s != 0.0 && gs >= 0.0 && gs <= 1.7976931348623157e+308) { // the guard measured scaled gradients", word(runtime.ClockScaler))
	p("    const double x = gs * %s;", word(runtime.ClockScale))
	p("    float f = (float)x;")
	p("    if ((double)f > x) f = __int_as_float(__float_as_int(f) - 1);")
	p("    gs = (double)f;")
	p("  }")
	p("  %s = gs;", slot("gsafe"))
	return nil
}

// writeRate renders schedule.Rate as the function $K_rate(clock, base,
// e), reading the schedule from the clock (runtime.ClockSched on): the
// same operations in the same order.
func writeRate(w *strings.Builder, c string) {
	at := func(i int) string { return fmt.Sprintf("%s[%d]", c, runtime.ClockSched+1+i) }
	stepSize, gamma, factor, sf, ef, iters, tmax, min, total, pct, div, fdiv, linear, three := at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7), at(8), at(9), at(10), at(11), at(12), at(13)
	pi := "3.141592653589793"
	k := runtime.ClockKinds
	fmt.Fprintf(w, `// schedule.Rate: the rate after e steps of an optimizer whose own rate is base.
static __device__ double $K_rate(const double *%s, double base, long long e) {
    const double x = (double)e;
    switch ((int)%s[%d]) {
    case %d: return base * pow(%s, (double)(e / (long long)%s));
    case %d: {
      double n = 0.0;
      for (int i = 0; i < (int)%s[%d]; ++i) if (e >= (long long)%s[%d + i]) n += 1.0;
      return base * pow(%s, n);
    }
    case %d: return base * pow(%s, x);
    case %d: return e >= (long long)%s ? base : base * %s;
    case %d: return base * (%s + (%s - %s) * (double)(e < (long long)%s ? e : (long long)%s) / %s);
    case %d: return %s + (base - %s) * (1.0 + cos(%s * x / %s)) / 2.0;
    case %d: {
      const double initial = base / %s, fin = initial / %s;
      if (e > (long long)%s) return fin;
      const double T = %s;
      double end[3], from[3], to[3];
      int n = 2;
      end[0] = %s * T - 1.0; from[0] = initial; to[0] = base;
      if (%s != 0.0) {
        n = 3;
        end[1] = 2.0 * %s * T - 2.0; from[1] = base; to[1] = initial;
        end[2] = T - 1.0; from[2] = initial; to[2] = fin;
      } else {
        end[1] = T - 1.0; from[1] = base; to[1] = fin;
      }
      double start = 0.0;
      for (int i = 0; i < n; ++i) {
        if (x <= end[i] || i == n - 1) {
          const double pct = (x - start) / (end[i] - start);
          if (%s != 0.0) return (to[i] - from[i]) * pct + from[i];
          return to[i] + (from[i] - to[i]) / 2.0 * (cos(%s * pct) + 1.0);
        }
        start = end[i];
      }
      return fin;
    }
    case %d:
      if (e < (long long)%s) return base * (%s + (1.0 - %s) * x / %s);
      if (e >= (long long)%s) return %s;
      return %s + (base - %s) * (1.0 + cos(%s * (double)(e - (long long)%s) / (%s - %s))) / 2.0;
    }
    return base;
}
`, c, c, runtime.ClockSched,
		k["step"], gamma, stepSize,
		k["multistep"], c, runtime.ClockMilestones, c, runtime.ClockMilestones+1, gamma,
		k["exponential"], gamma,
		k["constant"], iters, factor,
		k["linear"], sf, ef, sf, iters, iters, iters,
		k["cosine"], min, min, pi, tmax,
		k["onecycle"], div, fdiv, total, total, pct, three, pct, linear, pi,
		k["warmup_cosine"], iters, sf, sf, iters, total, min, min, min, pi, iters, total, iters)
}
