package history

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// modelInput is an operation as porcupine's models see it.
type modelInput struct {
	kind, arg string
}

// modelOutput is a reply; unknown for an ambiguous operation.
type modelOutput struct {
	out     string
	unknown bool
}

// CounterModel is the counter entity: inc returns the new count, get the count.
var CounterModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		n, in, out := state.(int64), input.(modelInput), output.(modelOutput)
		switch in.kind {
		case Inc:
			return out.unknown || Atoi(out.out) == n+1, n + 1
		default:
			return out.unknown || Atoi(out.out) == n, n
		}
	},
	DescribeOperation: describe,
}

// RegisterModel is the register entity: write sets the value, read returns it ("" at
// first).
var RegisterModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		v, in, out := state.(string), input.(modelInput), output.(modelOutput)
		if in.kind == Write {
			return true, in.arg
		}
		return out.unknown || out.out == v, v
	},
	DescribeOperation: describe,
}

func describe(input, output any) string {
	in, out := input.(modelInput), output.(modelOutput)
	res := out.out
	if out.unknown {
		res = "?"
	}
	if in.arg != "" {
		return fmt.Sprintf("%s(%s) -> %s", in.kind, in.arg, res)
	}
	return fmt.Sprintf("%s -> %s", in.kind, res)
}

// CheckEntities checks that each entity's history is linearizable: the operations of
// kinds Inc and Get on a key against CounterModel, those of kinds Write and Read against
// RegisterModel; other kinds, and failed operations, are left out. An ambiguous update
// may take effect at any time after its call, or never; an ambiguous read is left out
// (it showed nothing).
// timeout bounds porcupine's search per entity: a search that runs out is reported in
// unknown, not as a violation. A violation names the entity and lists its operations.
func CheckEntities(ops []Op, timeout time.Duration) (violations, unknown []string) {
	byKey := map[string][]porcupine.Operation{}
	models := map[string]*porcupine.Model{}
	for _, op := range ops {
		var model *porcupine.Model
		switch op.Kind {
		case Inc, Get:
			model = &CounterModel
		case Write, Read:
			model = &RegisterModel
		default:
			continue
		}
		if op.Failed {
			continue // it did not happen
		}
		if m, ok := models[op.Key]; ok && m != model {
			violations = append(violations, fmt.Sprintf("%s has both counter and register operations (%s)", op.Key, op.Kind))
			continue
		}
		models[op.Key] = model
		if op.Ambiguous && (op.Kind == Get || op.Kind == Read) {
			// A read that returned nothing changed nothing and showed nothing: it
			// constrains no linearization, and would only widen the search.
			continue
		}
		p := porcupine.Operation{ClientId: op.Client, Input: modelInput{op.Kind, op.Arg},
			Call: op.Call, Output: modelOutput{out: op.Out, unknown: op.Ambiguous}, Return: op.Ret}
		if op.Ambiguous {
			// It may take effect at any time after its call, or never.
			p.Return = math.MaxInt64
		}
		byKey[op.Key] = append(byKey[op.Key], p)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		switch porcupine.CheckOperationsTimeout(*models[k], byKey[k], timeout) {
		case porcupine.Illegal:
			violations = append(violations, fmt.Sprintf("%s is not linearizable: %s", k, Summarize(ops, k)))
		case porcupine.Unknown:
			unknown = append(unknown, k)
		}
	}
	return violations, unknown
}

// CheckCounterReads checks that no acknowledged inc was lost or invented: each
// acknowledged get of a counter returns at least the incs acknowledged before it was
// called, and at most the incs called before it returned. Linearizability implies it;
// its message says how many acknowledged incs a read missed.
func CheckCounterReads(ops []Op) []string {
	incs := map[string][]Op{}
	for _, op := range ops {
		if op.Kind == Inc && !op.Failed {
			incs[op.Key] = append(incs[op.Key], op)
		}
	}
	var out []string
	for _, op := range ops {
		if op.Kind != Get || op.Ambiguous || op.Failed {
			continue
		}
		v := Atoi(op.Out)
		var acked, called int64
		for _, a := range incs[op.Key] {
			if !a.Ambiguous && a.Ret < op.Call {
				acked++
			}
			if a.Call < op.Ret {
				called++
			}
		}
		switch {
		case v < acked:
			out = append(out, fmt.Sprintf("%s: get at %v-%v on member %d returned %d, but %d incs were acknowledged before it: %d lost",
				op.Key, ms(op.Call), ms(op.Ret), op.Member, v, acked, acked-v))
		case v > called:
			out = append(out, fmt.Sprintf("%s: get at %v-%v on member %d returned %d, but only %d incs were called before it returned",
				op.Key, ms(op.Call), ms(op.Ret), op.Member, v, called))
		}
	}
	return out
}

func ms(t int64) time.Duration { return time.Duration(t).Round(time.Millisecond) }

// Summarize lists an entity's operations in call order, for a report: call and return
// times since the history's start ("?" for an ambiguous return), the member asked, the
// operation and its reply. At most 80.
func Summarize(ops []Op, key string) string {
	var mine []Op
	for _, op := range ops {
		if op.Key == key {
			mine = append(mine, op)
		}
	}
	sort.SliceStable(mine, func(i, j int) bool { return mine[i].Call < mine[j].Call })
	var parts []string
	for _, op := range mine {
		res, end := op.Out, ms(op.Ret).String()
		if op.Ambiguous {
			res, end = "?", "?"
		}
		arg := ""
		if op.Arg != "" {
			arg = "(" + op.Arg + ")"
		}
		parts = append(parts, fmt.Sprintf("[%v-%v m%d %s%s=%s]", ms(op.Call), end, op.Member, op.Kind, arg, res))
	}
	const max = 80
	if len(parts) > max {
		parts = append(parts[:max], fmt.Sprintf("... %d more", len(parts)-max))
	}
	return strings.Join(parts, " ")
}
