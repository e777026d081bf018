package wasmbin

import (
	"errors"
	"math"
	"slices"
)

// The deploy-time rewrite that coalesces a module's data segments.
//
// wazero keeps, for every instance, a slice header per data segment of its module
// (ModuleInstance.DataInstances, 24 bytes each, pointers the garbage collector scans)
// and evaluates each segment's offset expression and copies its bytes at every
// instantiation. Go's wasip1 port writes its initial memory as tens of thousands of small
// segments (the counter example: 31,737 segments for 770 KB, most of them a few bytes,
// split wherever the data has a run of zeros): 760 KB of pointers per instance, and most
// of an activation's CPU spent applying segments one by one.
//
// coalesceData rewrites the data section into as few segments as leave the instance's
// initial memory the same: sorted by offset, two segments that are at most dataMergeGap
// bytes apart become one, the bytes between them written as zeros. It rewrites only what
// it can show to be equivalent:
//
//   - every segment is active, for memory 0, at an offset that is an i32.const;
//   - no two segments overlap, so the order they are applied in changes nothing;
//   - the memory is the module's own, not imported, so the bytes between two segments
//     are zero before instantiation and no segment writes them;
//   - there is no data count section, without which no function can name a segment
//     (memory.init and data.drop need it), so renumbering the segments changes nothing.
//
// A segment out of the memory's bounds fails the instantiation before and after the
// rewrite. Anything else (a module it cannot read, a passive segment, an offset read
// from a global) leaves the module as it is: the rewrite is an optimisation, never a
// reason to refuse a module. Like the other rewrites, it is a pure function of its input.

// dataMergeGap is the widest run of bytes between two data segments that coalesceData
// fills with zeros to join them, in bytes.
const dataMergeGap = 64

// dataSegment is an active data segment of memory 0 at a constant offset.
type dataSegment struct {
	offset uint32
	init   []byte
}

// coalesceData returns wasm with its data segments coalesced as described above, and
// how many segments fewer it has; wasm itself, and 0, when it leaves the module as it is.
// It never fails.
func coalesceData(wasm []byte) ([]byte, int) {
	sections, err := splitSections(wasm)
	if err != nil {
		return wasm, 0
	}
	var data *wasmSection
	for i := range sections {
		switch s := &sections[i]; s.id {
		case secDataCount:
			return wasm, 0
		case secImport:
			if importsMemory(wasm[s.start:s.end]) {
				return wasm, 0
			}
		case secData:
			data = s
		}
	}
	if data == nil {
		return wasm, 0
	}
	segs, ok := activeDataSegments(wasm[data.start:data.end])
	if !ok || len(segs) < 2 {
		return wasm, 0
	}
	slices.SortStableFunc(segs, func(a, b dataSegment) int {
		return cmpUint32(a.offset, b.offset)
	})
	merged := make([]dataSegment, 0, len(segs))
	for _, s := range segs {
		if k := len(merged) - 1; k >= 0 {
			end := uint64(merged[k].offset) + uint64(len(merged[k].init))
			if uint64(s.offset) < end {
				return wasm, 0 // overlapping segments: the order matters
			}
			if uint64(s.offset)-end <= dataMergeGap {
				b := merged[k].init
				b = append(b, make([]byte, uint64(s.offset)-end)...)
				merged[k].init = append(b, s.init...)
				continue
			}
		}
		// A copy, so that appending to a merged segment never writes into wasm.
		merged = append(merged, dataSegment{offset: s.offset, init: slices.Clip(slices.Clone(s.init))})
	}
	if len(merged) == len(segs) {
		return wasm, 0
	}
	content := appendU32(nil, uint32(len(merged)))
	for _, s := range merged {
		content = append(content, 0x00, 0x41) // active, memory 0; i32.const
		content = appendS32(content, int32(s.offset))
		content = append(content, 0x0b)
		content = appendU32(content, uint32(len(s.init)))
		content = append(content, s.init...)
	}
	if uint64(len(content)) > math.MaxUint32 {
		return wasm, 0
	}
	out := make([]byte, 0, len(wasm)+len(content)-(data.end-data.start))
	out = append(out, wasm[:data.header]...)
	out = append(out, secData)
	out = appendU32(out, uint32(len(content)))
	out = append(out, content...)
	out = append(out, wasm[data.end:]...)
	return out, len(segs) - len(merged)
}

func cmpUint32(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// activeDataSegments reads a data section; false when it is malformed or has a segment
// that is not active for memory 0 at an i32.const offset. The segments' bytes alias sec.
func activeDataSegments(sec []byte) ([]dataSegment, bool) {
	r := reader{b: sec}
	n, err := r.u32()
	if err != nil || uint64(n) > uint64(len(sec)) {
		return nil, false
	}
	segs := make([]dataSegment, 0, n)
	for i := uint32(0); i < n; i++ {
		if flags, err := r.u32(); err != nil || flags != 0 {
			return nil, false
		}
		if op, err := r.byte(); err != nil || op != 0x41 {
			return nil, false
		}
		offset, err := r.s32()
		if err != nil {
			return nil, false
		}
		if end, err := r.byte(); err != nil || end != 0x0b {
			return nil, false
		}
		size, err := r.u32()
		if err != nil || uint64(size) > uint64(len(sec)-r.off) {
			return nil, false
		}
		segs = append(segs, dataSegment{offset: uint32(offset), init: sec[r.off : r.off+int(size)]})
		r.off += int(size)
	}
	return segs, r.off == len(sec)
}

// importsMemory reports whether an import section imports a memory; true when it
// cannot be read.
func importsMemory(sec []byte) bool {
	im, err := scanImports(sec)
	return err != nil || im.memories > 0
}

// s32 reads a signed LEB128 value of at most 32 bits.
func (r *reader) s32() (int32, error) {
	var v int64
	for shift := uint(0); ; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7f) << shift
		if c&0x80 == 0 {
			if c&0x40 != 0 {
				v |= -1 << (shift + 7)
			}
			break
		}
		if shift+7 >= 35 {
			return 0, errors.New("LEB128 encoding too long")
		}
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return 0, errors.New("LEB128 value out of range")
	}
	return int32(v), nil
}
