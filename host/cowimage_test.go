package host

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/internal/testwasm"
)

// cowOrSkip skips where the system maps no image copy-on-write.
func cowOrSkip(t *testing.T, m *wasmModule) *cowImage {
	t.Helper()
	img := m.pre.image.Load()
	if img == nil {
		t.Fatalf("no image: %s", m.Activation())
	}
	if img.cow == nil {
		if _, err := newCowImage(img); err != nil {
			t.Skipf("no image mapped copy-on-write here: %v", err)
		}
		t.Fatal("the module's image is not mapped, though the system can")
	}
	return img.cow
}

func (a *memArena) mappedSlots() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cowLive
}

// statesOf counts the pages of b by what backs them.
func statesOf(t *testing.T, a *memArena, b []byte) (own, file int) {
	t.Helper()
	states := a.pageStates(b)
	if states == nil {
		t.Skip("the system does not say what backs a page")
	}
	for _, s := range states {
		switch s {
		case pageOwn:
			own++
		case pageFile:
			file++
		}
	}
	return own, file
}

// mappedCounter compiles the counter example built by Go's port on a runtime without
// resident slots, and returns the runtime's arena, the module (closed when the test
// ends) and its mapped image; it skips the test where images cannot be mapped.
func mappedCounter(t *testing.T) (*memArena, *wasmModule, *cowImage) {
	t.Helper()
	rt := preinitRuntime(t, func(c *RuntimeConfig) { c.InstancePoolBytes = -1 })
	a := arenaOrSkip(t, rt)
	ctx := context.Background()
	m, err := rt.Compile(ctx, testwasm.Bytes(t, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(ctx) })
	return a, m, cowOrSkip(t, m)
}

// An instance of Go's port whose image is mapped keeps of its own only the pages it
// wrote, reads the others from the image's file, and says so in its activation; when
// it is closed, its slot maps anonymous memory again, with nothing backed, and reads
// as zero.
func TestMappedImageKeepsOnlyTheWrittenPages(t *testing.T) {
	a, m, c := mappedCounter(t)
	ctx := context.Background()
	if got := m.Activation(); !strings.Contains(got, "mapped copy-on-write") {
		t.Fatalf("activation %q does not say the image is mapped", got)
	}
	img := m.pre.image.Load()
	inst := imageInstance(t, m, "counter", "c1")
	if inst.lm == nil || inst.lm.cow != c.size {
		t.Fatal("the instance's memory does not map the image")
	}
	if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
		t.Fatal(err)
	}
	slot := inst.lm.slot
	own, file := statesOf(t, a, slot[:c.size])
	imagePages := img.bytes() / pageSize
	if own == 0 || file == 0 || own > imagePages/4 {
		t.Fatalf("where the image is mapped: %d pages of the instance's own, %d of the file; the image holds %d",
			own, file, imagePages)
	}
	if a.mappedSlots() != 1 {
		t.Fatalf("%d slots map an image, want 1", a.mappedSlots())
	}
	inst.Close(ctx)
	if a.mappedSlots() != 0 {
		t.Fatalf("%d slots map an image after the close, want none", a.mappedSlots())
	}
	if own, file := statesOf(t, a, slot[:c.size]); own != 0 || file != 0 {
		t.Fatalf("a closed instance's slot keeps %d pages of its own and %d of the file", own, file)
	}
	if !bytes.Equal(slot[:c.size], make([]byte, c.size)) {
		t.Fatal("a closed instance's slot does not read as zero")
	}
}

// Past the most slots the arena maps, instances get the image copied, and are the
// same instance.
func TestImagesPastTheMappingLimitAreCopied(t *testing.T) {
	a, m, _ := mappedCounter(t)
	ctx := context.Background()
	a.mu.Lock()
	a.cowMax = 1
	a.mu.Unlock()
	first := imageInstance(t, m, "counter", "c1")
	second := imageInstance(t, m, "counter", "c1")
	if first.lm.cow == 0 || second.lm.cow != 0 {
		t.Fatalf("the first instance maps %d bytes of the image, the second %d: want the first only", first.lm.cow, second.lm.cow)
	}
	fresh, fresh2 := freshInstance(t, m, "counter", "c1"), freshInstance(t, m, "counter", "c1")
	sameState(t, "mapped", fresh, first)
	sameState(t, "copied", fresh2, second)
	for _, msg := range []string{"inc", "inc", "get"} {
		receiveBoth(t, fresh, first, msg)
		receiveBoth(t, fresh2, second, msg)
	}
	sameState(t, "mapped, after messages", fresh, first)
	sameState(t, "copied, after messages", fresh2, second)
	first.Close(ctx)
	second.Close(ctx)
	if a.mappedSlots() != 0 {
		t.Fatalf("%d slots map an image after the closes", a.mappedSlots())
	}
}

// A resident slot that maps the image keeps only what its last instance wrote, and
// charges the pool for no more: the file's pages are not its own.
func TestResidentSlotMappingTheImageChargesItsOwnPages(t *testing.T) {
	rt, a := slotsRuntime(t)
	ctx := context.Background()
	m, err := rt.Compile(ctx, testwasm.Bytes(t, "counter"))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	c := cowOrSkip(t, m)
	residentPoolOf(t, m)
	inst := imageInstance(t, m, "counter", "c1")
	if _, err := inst.Receive(ctx, []byte("inc")); err != nil {
		t.Fatal(err)
	}
	slot := inst.lm.slot
	own, _ := statesOf(t, a, slot[:c.size])
	inst.Close(ctx)
	n, charged := a.residentCounts()
	img := m.pre.image.Load()
	if n != 1 || charged <= 0 || charged >= int64(img.bytes()) {
		t.Fatalf("%d slots kept, %d bytes charged; want one, charged under the image's %d bytes", n, charged, img.bytes())
	}
	if kept, _ := statesOf(t, a, slot[:c.size]); kept != own {
		t.Fatalf("the kept slot has %d pages of its own where the image is mapped, its instance had %d", kept, own)
	}
	if a.mappedSlots() != 1 {
		t.Fatalf("%d slots map an image, want the kept one", a.mappedSlots())
	}
	a.dropResident(m.resident.Swap(nil)) // as the module's close does
	if a.mappedSlots() != 0 {
		t.Fatalf("%d slots map an image once the kept slots are given back", a.mappedSlots())
	}
}
