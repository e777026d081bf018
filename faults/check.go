package faults

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

// counterModel is the counter entity: inc returns the new count, get the count.
var counterModel = porcupine.Model{
	Init: func() any { return int64(0) },
	Step: func(state, input, output any) (bool, any) {
		n, in, out := state.(int64), input.(modelInput), output.(modelOutput)
		switch in.kind {
		case opInc:
			return out.unknown || atoi(out.out) == n+1, n + 1
		default:
			return out.unknown || atoi(out.out) == n, n
		}
	},
	DescribeOperation: describe,
}

// registerModel is the register entity: write sets the value, read returns it ("" at
// first).
var registerModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		v, in, out := state.(string), input.(modelInput), output.(modelOutput)
		if in.kind == opWrite {
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

// checkTimeout bounds porcupine's search per entity; a search that runs out is
// reported as unknown, not as a failure.
const checkTimeout = 10 * time.Second

// checkEntities checks that each entity's history is linearizable. It returns the
// violations, and the keys whose check ran out of time.
func checkEntities(ops []Op) (violations, unknown []string) {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range ops {
		if op.Kind == opAdd || op.Kind == opSum {
			continue
		}
		if op.Ambiguous && (op.Kind == opGet || op.Kind == opRead) {
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
		model := registerModel
		if strings.HasPrefix(k, typeCounter+"/") {
			model = counterModel
		}
		switch porcupine.CheckOperationsTimeout(model, byKey[k], checkTimeout) {
		case porcupine.Illegal:
			violations = append(violations, fmt.Sprintf("%s is not linearizable: %s", k, summarize(ops, k)))
		case porcupine.Unknown:
			unknown = append(unknown, k)
		}
	}
	return violations, unknown
}

// summarize lists an entity's acknowledged operations in call order, for the report.
func summarize(ops []Op, key string) string {
	var parts []string
	for _, op := range ops {
		if op.Key != key {
			continue
		}
		res := op.Out
		if op.Ambiguous {
			res = "?"
		}
		arg := ""
		if op.Arg != "" {
			arg = "(" + op.Arg + ")"
		}
		parts = append(parts, fmt.Sprintf("[%v-%v m%d %s%s=%s]", time.Duration(op.Call).Round(time.Millisecond),
			ambiguousEnd(op), op.Member, op.Kind, arg, res))
	}
	const max = 80
	if len(parts) > max {
		parts = append(parts[:max], fmt.Sprintf("... %d more", len(parts)-max))
	}
	return strings.Join(parts, " ")
}

func ambiguousEnd(op Op) string {
	if op.Ambiguous {
		return "?"
	}
	return time.Duration(op.Ret).Round(time.Millisecond).String()
}

// checkMajority checks the distributed data counter: a majority read sees at least the
// majority increments acknowledged before it was called, and at most the increments
// called before it returned.
func checkMajority(ops []Op) []string {
	var adds []Op
	for _, op := range ops {
		if op.Kind == opAdd {
			adds = append(adds, op)
		}
	}
	var out []string
	for _, op := range ops {
		if op.Kind != opSum || op.Ambiguous {
			continue
		}
		v := atoi(op.Out)
		var acked, called int64
		for _, a := range adds {
			if !a.Ambiguous && a.Ret < op.Call {
				acked++
			}
			if a.Call < op.Ret {
				called++
			}
		}
		if v < acked || v > called {
			out = append(out, fmt.Sprintf("majority read of %s at %v-%v on member %d returned %d: %d increments were acknowledged before it, %d called before it returned",
				ddataKey, time.Duration(op.Call).Round(time.Millisecond), time.Duration(op.Ret).Round(time.Millisecond),
				op.Member, v, acked, called))
		}
	}
	return out
}
