package host

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	otellog "go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shardhost/shardhost/abi"
	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/internal/obs"
	"github.com/shardhost/shardhost/internal/owner"
)

// RuntimeConfig configures the node's wasm runtime (Config.Runtime): the sandbox of
// every entity instance.
type RuntimeConfig struct {
	// CacheDir is the directory of wazero's compilation cache: a module compiled once is
	// loaded from it on the next start (about 20× faster for a Go guest). Empty keeps
	// the cache in memory only.
	CacheDir string
	// MemoryLimit caps the linear memory of every instance, in bytes, rounded down to
	// 64 KiB pages. A guest that grows past it gets a failed memory.grow (Go guests then
	// die with "out of memory"). Default 64 MiB; a Go guest starts at about 2.4 MiB.
	MemoryLimit uint64
	// MessageDeadline is how long one message may run inside the guest before the
	// instance is stopped and the message fails with ErrGuestDeadline. Default 5 s.
	MessageDeadline time.Duration
	// ActivationDeadline bounds an instantiation (the module's _initialize: a Go guest
	// starts its runtime there), and each message an in-memory recovery replays (when
	// longer than MessageDeadline: the message ended once within it). It is separate
	// from MessageDeadline so that a loaded host does not fail activations or
	// recoveries, and still stops a guest whose initialisation never ends. Default 30 s.
	ActivationDeadline time.Duration
	// MaxMessageSize caps a message and a reply, in bytes. Default abi.MaxMessageSize.
	MaxMessageSize int
	// Logger receives the guests' log lines and stdout/stderr. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider makes the "instantiate", "restore" and "guest call" spans. Nil:
	// none.
	TracerProvider trace.TracerProvider
	// MeterProvider records guest call durations, host calls per message, the linear
	// memory of active instances and module compile times. Nil: none.
	MeterProvider metric.MeterProvider
	// CallBudget is how many host function calls one call of the guest (a message, a
	// hook) may make; the call past it traps. Default abi.DefaultCallBudget.
	CallBudget int
	// Clock gives the guests' wall and monotonic time (the host function now). Default
	// time.Now; tests give a fixed or simulated one.
	Clock func() time.Time
	// Rand gives the guests' random bytes (the host function random). Default
	// crypto/rand.Reader; tests give a seeded one.
	Rand io.Reader
	// CompileBeforeServing makes Load compile a module with the optimizing compiler
	// before it returns (seconds for a 2.7 MB Go guest), as Compile does, instead of
	// validating it on the interpreter and compiling it in the background: a deploy
	// then returns later, and no entity ever runs on the interpreter (about 25× slower
	// per message for a Go guest). Tests whose message deadlines assume compiled code
	// set it. Default false.
	CompileBeforeServing bool
	// EntityLogRate is how many log lines (stdout, stderr, log calls) per second each
	// entity may write on average, twice that in a burst; the lines beyond are dropped
	// and counted in shardhost.entity.log.dropped. 0: DefaultEntityLogRate; negative:
	// no limit.
	EntityLogRate float64
	// EntityLogBytes bounds the text of all the entities' log rings, in bytes; past it,
	// the rings of the entities that logged least recently are dropped. 0:
	// DefaultEntityLogBytes.
	EntityLogBytes int64
	// LoggerProvider, when set, receives every entity log line as an OpenTelemetry log
	// record (internal/telemetry.LoggerProvider, OTEL_LOGS_EXPORTER). Nil: none.
	LoggerProvider otellog.LoggerProvider
	// InstancePoolBytes bounds the memory that closed instances of pre-initialized
	// modules keep, re-imaged, for the next instances of their module to start in
	// without a page fault (host/residentslots.go): the backed bytes of all kept
	// memories together. Idle kept memories are given back within 20 s. 0:
	// DefaultInstancePoolBytes (1/16 of physical memory); negative: none kept.
	InstancePoolBytes int64
}

// poolBytes is InstancePoolBytes with its default applied; 0 for none.
func (c RuntimeConfig) poolBytes() int64 {
	switch {
	case c.InstancePoolBytes < 0:
		return 0
	case c.InstancePoolBytes == 0:
		return DefaultInstancePoolBytes()
	}
	return c.InstancePoolBytes
}

// defaultRuntimeConfig returns the defaults described on RuntimeConfig.
func defaultRuntimeConfig() RuntimeConfig {
	return RuntimeConfig{
		MemoryLimit:        64 << 20,
		MessageDeadline:    5 * time.Second,
		ActivationDeadline: 30 * time.Second,
		MaxMessageSize:     abi.MaxMessageSize,
		CallBudget:         abi.DefaultCallBudget,
	}
}

// Validate reports a configuration that cannot work.
func (c RuntimeConfig) Validate() error {
	switch {
	case c.MemoryLimit < 1<<16:
		return fmt.Errorf("host: memory limit %d bytes is under one 64 KiB page", c.MemoryLimit)
	case c.MemoryLimit > 4<<30:
		return fmt.Errorf("host: memory limit %d bytes is over the 4 GiB of wasm32", c.MemoryLimit)
	case c.MessageDeadline <= 0 || c.ActivationDeadline <= 0:
		return fmt.Errorf("host: message and activation deadlines must be positive, got %v and %v", c.MessageDeadline, c.ActivationDeadline)
	case c.MaxMessageSize <= 0:
		return fmt.Errorf("host: max message size must be positive, got %d", c.MaxMessageSize)
	case c.CallBudget < 0:
		return fmt.Errorf("host: host call budget must not be negative, got %d", c.CallBudget)
	case c.EntityLogBytes < 0:
		return fmt.Errorf("host: entity log bytes must not be negative, got %d", c.EntityLogBytes)
	case c.InstancePoolBytes > 0 && c.InstancePoolBytes < pageSize:
		return fmt.Errorf("host: instance pool of %d bytes is under one 4 KiB page, too small for any instance: give a larger one, or a negative one for no pool", c.InstancePoolBytes)
	}
	return nil
}

// wasmRuntime compiles and instantiates entity modules: two wazero runtimes, one in compiler
// mode and one in interpreter mode, each with the WASI and shardhost host modules
// instantiated once. Load validates a module on the interpreter (about 10× faster than
// compiling it: 0.2–0.6 s against 1.7–7 s for a 2.7 MB Go guest here) and its instances
// run there until the compiler's code, made in the background, replaces it
// (wasmModule.CompileInBackground). It is safe for concurrent use; the instances it makes
// are not.
type wasmRuntime struct {
	cfg    RuntimeConfig
	log    *slog.Logger
	tracer trace.Tracer
	tel    *runtimeTelemetry
	r      wazero.Runtime
	// interp is the interpreter runtime: Load validates modules in it, and their
	// instances run in it until the compiled module is ready.
	interp wazero.Runtime
	cache  wazero.CompilationCache
	// marks is the directory of the compiled marks (markCompiled), beside wazero's
	// compilation cache; empty without a cache directory.
	marks string
	// compileHook, when set (by tests), runs at the start of every background
	// compilation, with the module's digest; an error fails that compilation.
	compileHook func(ctx context.Context, digest string) error
	// arena holds the instances' linear memories (linearmem.go).
	arena *memArena
	// cowMinBytes is the fewest bytes of image a module's image is mapped
	// copy-on-write for (cowimage.go), cowMinImageBytes; tests change it before they
	// compile.
	cowMinBytes atomic.Int64
	// inflight counts what uses an instance's memory now (instantiations, calls,
	// snapshots); once closing is set, enter refuses new ones and Close waits for
	// inflight to drain before it closes the modules and their memories.
	inflight atomic.Int64
	closing  atomic.Bool
	// live are the instances not closed, which Close stops.
	mu   sync.Mutex
	live map[*wasmInstance]struct{}
	// bg owns the runtime's background compilations (modules, restore images): Close
	// closes it, which cancels the modules' compilations (their context derives from
	// bg's), and waits for them.
	bg *owner.Group
	// started is the origin of the guests' monotonic clock.
	started time.Time
	randMu  sync.Mutex
	// logs are the entities' log rings (entitylog.go).
	logs *entityLogs
}

// newWasmRuntime returns a runtime configured by cfg. Close releases it.
func newWasmRuntime(ctx context.Context, cfg RuntimeConfig) (*wasmRuntime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.CallBudget == 0 {
		cfg.CallBudget = abi.DefaultCallBudget
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Reader
	}
	pages := uint32(cfg.MemoryLimit >> 16)
	rc := wazero.NewRuntimeConfigCompiler().WithMemoryLimitPages(pages)
	// Not WithCloseOnContextDone: a goroutine per call and an exit to Go per loop
	// iteration; the checks wasmbin.Rewrite compiles in stop a guest instead.
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("host: compilation cache: %w", err)
		}
		c, err := wazero.NewCompilationCacheWithDir(cfg.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("host: compilation cache: %w", err)
		}
		cache = c
		rc = rc.WithCompilationCache(c)
	}
	marks := ""
	if cfg.CacheDir != "" {
		marks = filepath.Join(cfg.CacheDir, "shardhost-compiled-"+wazeroVersion())
	}
	// The interpreter stops a guest whose call context is done (a goroutine per call,
	// small beside the interpreter's cost): stopGuest cancels an interpreted
	// instance's context rather than set its stop global, which the interpreter reads
	// in Go code, racing with the timer's write.
	ic := wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(pages).WithCloseOnContextDone(true)
	rt := &wasmRuntime{
		cfg:    cfg,
		log:    cfg.Logger,
		tracer: obs.Tracer(cfg.TracerProvider, "host"),
		tel:    newRuntimeTelemetry(cfg.TracerProvider, cfg.MeterProvider),
		logs: newEntityLogs(entityLogsConfig{rate: cfg.EntityLogRate, maxBytes: cfg.EntityLogBytes,
			provider: cfg.LoggerProvider, meter: cfg.MeterProvider}),
		r:      wazero.NewRuntimeWithConfig(ctx, rc),
		interp: wazero.NewRuntimeWithConfig(ctx, ic),
		cache:  cache,
		marks:  marks,
		arena:  newMemArena(cfg.MemoryLimit>>16<<16, cfg.poolBytes()),
	}
	rt.live = map[*wasmInstance]struct{}{}
	rt.cowMinBytes.Store(cowMinImageBytes)
	rt.bg = owner.New()
	rt.started = cfg.Clock()
	for _, r := range []wazero.Runtime{rt.r, rt.interp} {
		if _, err := wasi_snapshot_preview1.Instantiate(ctx, r); err != nil {
			rt.Close(ctx)
			return nil, fmt.Errorf("host: instantiating WASI: %w", err)
		}
		if err := rt.instantiateHostModule(ctx, r); err != nil {
			rt.Close(ctx)
			return nil, err
		}
	}
	return rt, nil
}

// Close releases the runtime and every module and instance it made, after any
// background compilation ends. Guest calls in flight are stopped (at their next loop
// iteration, or when their host call sees its context cancelled) and waited for, at
// most until ctx ends or one message deadline has passed, so that no instance's memory
// is released under a running call; the instances' later calls fail with
// ErrRuntimeClosed.
func (rt *wasmRuntime) Close(ctx context.Context) error {
	rt.closing.Store(true)
	rt.bg.Close()
	rt.mu.Lock()
	for inst := range rt.live {
		// Stop the call in flight, and cancel the instance's context: its host calls
		// that wait (a ddata read, say) return.
		inst.stopGuest()
		inst.cancel()
	}
	rt.mu.Unlock()
	wait := time.NewTimer(rt.cfg.MessageDeadline)
	defer wait.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for rt.inflight.Load() > 0 {
		select {
		case <-tick.C:
			continue
		case <-wait.C:
		case <-ctx.Done():
		}
		rt.log.Warn("runtime closed under guest calls that did not stop", "calls", rt.inflight.Load())
		break
	}
	rt.bg.Wait()
	err := errors.Join(rt.r.Close(ctx), rt.interp.Close(ctx))
	rt.arena.close()
	if rt.cache != nil {
		if cerr := rt.cache.Close(ctx); err == nil {
			err = cerr
		}
	}
	return err
}

// wasmModule is a compiled, validated entity module. What is compiled is the module as
// uploaded with every mutable global exported (wasmbin.Rewrite, for snapshots); Digest
// and Size are those of the upload, since the rewrite is deterministic and every host
// derives the same compiled module from the same bytes.
type wasmModule struct {
	rt *wasmRuntime
	// code is what new instances are made from: the interpreter's until the
	// background compilation replaces it with the compiler's (CompileInBackground).
	code atomic.Pointer[moduleCode]
	// interpreted is the interpreter's code, if Load made the module; kept until Close,
	// since instances made from it may still run.
	interpreted *moduleCode
	snap        *moduleSnapshots // snapshot.go
	pre         moduleImage      // preinit.go
	// bg is the background compilation's state.
	bg moduleCompilation
	// Digest is the SHA-256 of the module's bytes, in hex.
	Digest string
	// Size is the module's size in bytes.
	Size int
	// ABIVersion is the ABI version the module's marker declares.
	ABIVersion int
	// guestSnapshot: the module exports shardhost_snapshot and shardhost_restore.
	guestSnapshot bool
	// guestMigrate: it exports shardhost_migrate too (MigrateGuest).
	guestMigrate bool
	// ops are the exports the host calls through shardhost_dispatch (wasmbin.Ops);
	// the hooks shardhost_on_activate and shardhost_on_passivate only when the module
	// declares ABI v1.
	ops wasmbin.Ops
	// start are the exports a new instance runs first: the module's start function,
	// if it had one (wasmbin.Rewrite exports it), and _initialize.
	start []wasmbin.Op
	// hot are the pages of a slot its instances touch by the end of their first
	// message, which the arena keeps backed in a few slots (linearmem_prefault.go).
	hot moduleHotPages
	// resident are the closed instances' slots kept holding the image
	// (residentslots.go); nil without an image or a pool.
	resident atomic.Pointer[residentPool]
}

// moduleCode is a module compiled by one of the runtime's engines, and that runtime,
// which instantiates it.
type moduleCode struct {
	r        wazero.Runtime
	compiled wazero.CompiledModule
	// interpreted: compiled by wazero's interpreter.
	interpreted bool
}

// moduleCompilation is a wasmModule's background compilation (CompileInBackground).
type moduleCompilation struct {
	once sync.Once
	// rewritten is the module the compiler compiles; nil once it has.
	rewritten []byte
	// done is closed when the compilation has ended, with err set before.
	done chan struct{}
	err  error
	// cancel stops the compilation under way (wasmModule.Close).
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
}

// moduleDigest returns the hex SHA-256 of a module binary, the name under which modules are
// stored and fetched.
func moduleDigest(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

// Compile compiles and validates a module with wazero's optimizing compiler, and
// returns it when its instances run compiled code (a 2.7 MB Go guest: 1.7–7 s on a
// loaded 2-core machine without the compilation cache, 20–30 ms with it). It refuses
// what Load refuses, with the same errors.
func (rt *wasmRuntime) Compile(ctx context.Context, wasm []byte) (*wasmModule, error) {
	return rt.load(ctx, wasm, moduleDigest(wasm), false)
}

// Load validates a module and returns it ready to run on wazero's interpreter: the
// interpreter compiles a module about 10× faster than the optimizing compiler and its
// instances keep the same sandbox (the memory cap, the linear memory from the arena,
// the deadline checks compiled into the module by wasmbin.Rewrite), at about 25× the
// cost of a compiled message for a Go guest. CompileInBackground then compiles it, and
// new instances run the compiled code from then on.
//
// The module must be WebAssembly that wazero compiles, export the ABI v0 marker,
// shardhost_alloc, shardhost_receive and its memory with the signatures of
// abi/SPEC.md, import nothing but WASI and the shardhost host functions, and
// instantiate (running _initialize) within the activation deadline. Every refusal
// wraps ErrInvalidModule and says what is wrong.
//
// What is compiled is the module rewritten by wasmbin.Rewrite, which exports every
// mutable global so that wasmInstance.Snapshot and wasmModule.Restore reach them, and
// adds the loop checks that let the host stop the guest at its deadline; the module's
// Digest and Size are those of wasm as given, which is what is stored and fetched. The
// rewrite is deterministic: every host compiles the same module from the same bytes.
//
// A module whose compiled code is in the runtime's compilation cache (it was compiled in
// the background by this process or an earlier one with the same cache directory and
// wazero version: markCompiled) is compiled at once instead, from the cache, in
// milliseconds.
func (rt *wasmRuntime) Load(ctx context.Context, wasm []byte) (*wasmModule, error) {
	return rt.loadDigest(ctx, wasm, moduleDigest(wasm))
}

// loadDigest is Load of a module whose moduleDigest the caller has computed already (a
// SHA-256 of a Go guest costs milliseconds).
func (rt *wasmRuntime) loadDigest(ctx context.Context, wasm []byte, digest string) (*wasmModule, error) {
	return rt.load(ctx, wasm, digest, !rt.cfg.CompileBeforeServing && !rt.cachedCompiled(digest))
}

// cachedCompiled reports whether the module with the digest was compiled into the
// compilation cache (markCompiled).
func (rt *wasmRuntime) cachedCompiled(digest string) bool {
	if rt.marks == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(rt.marks, digest))
	return err == nil
}

// markCompiled records that the module with the digest is in the compilation cache,
// as an empty file named by the digest in a directory beside the cache's, named by
// wazero's version (whose cache is per version). A mark whose cache entry was removed
// costs a compilation in Load, as long as Compile's.
func (rt *wasmRuntime) markCompiled(digest string) {
	if rt.marks == "" {
		return
	}
	err := os.MkdirAll(rt.marks, 0o755)
	if err == nil {
		err = os.WriteFile(filepath.Join(rt.marks, digest), nil, 0o644)
	}
	if err != nil {
		rt.log.Warn("compiled module not marked: the next start runs it on the interpreter until it is compiled again",
			"digest", digest[:12], "err", err)
	}
}

// wazeroVersion is the version of the wazero module this binary is built with.
func wazeroVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				if d.Replace != nil {
					d = d.Replace
				}
				return d.Version
			}
		}
	}
	return "unknown"
}

// load is Compile (interpret false) and Load; digest is moduleDigest(wasm).
func (rt *wasmRuntime) load(ctx context.Context, wasm []byte, digest string, interpret bool) (*wasmModule, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, fmt.Errorf("%w: not a WebAssembly binary (no \\0asm header)", ErrInvalidModule)
	}
	engine := "compiler"
	if interpret {
		engine = "interpreter"
	}
	defer func(start time.Time) {
		rt.tel.compileDur.Record(context.Background(), since(start), metric.WithAttributes(attrEngine.String(engine)))
	}(time.Now())
	// Before wazero sees it: wazero allocates what a module's counts say.
	if err := wasmbin.CheckBounds(wasm); err != nil {
		return nil, err
	}
	rw, rerr := wasmbin.Rewrite(wasm)
	rewritten := rw.Wasm
	if rerr != nil {
		// wazero's account of a malformed module comes first; the rewrite's otherwise.
		rewritten = wasm
	}
	code := &moduleCode{r: rt.r, interpreted: interpret}
	if interpret {
		code.r = rt.interp
	}
	compiled, err := code.r.CompileModule(ctx, rewritten)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidModule, firstLine(err.Error()))
	}
	if rerr != nil {
		compiled.Close(ctx)
		return nil, rerr
	}
	code.compiled = compiled
	m := &wasmModule{rt: rt, Digest: digest, Size: len(wasm), ops: rw.Ops}
	m.code.Store(code)
	m.bg.done = make(chan struct{})
	if interpret {
		m.interpreted = code
		m.bg.rewritten = rewritten
	} else {
		m.bg.once.Do(func() { close(m.bg.done) })
	}
	for _, op := range []wasmbin.Op{wasmbin.OpStart, wasmbin.OpInitialize} {
		if rw.Ops.Has(op) {
			m.start = append(m.start, op)
		}
	}
	_, m.guestMigrate = compiled.ExportedFunctions()[abi.ExportMigrate]
	if m.ABIVersion, m.guestSnapshot, err = checkShape(compiled); err != nil {
		compiled.Close(ctx)
		return nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	if m.ABIVersion < 1 {
		m.ops &^= 1<<wasmbin.OpOnActivate | 1<<wasmbin.OpOnPassivate
		m.guestMigrate = false // a v1 export
	}
	if m.snap, err = newModuleSnapshots(rewritten, rw.Globals); err != nil {
		compiled.Close(ctx)
		return nil, err
	}
	// A probe instance shows that it links and that _initialize runs.
	inst, err := m.Instantiate(ctx, "", "")
	if err != nil {
		compiled.Close(ctx)
		return nil, fmt.Errorf("%w: instantiation failed: %v", ErrInvalidModule, err)
	}
	m.capturePreImage(inst)
	inst.Close(ctx)
	if ok, why := m.PreInitialized(); ok {
		img := m.pre.image.Load()
		rt.log.Debug("module pre-initialized: new instances start from its image", "digest", digest[:12],
			"pages", img.pages, "image_bytes", img.bytes())
	} else {
		rt.log.Info("module not pre-initialized: new instances run its initialisation", "digest", digest[:12], "reason", why)
	}
	return m, nil
}

// CompileInBackground starts compiling a module made by Load with wazero's optimizing
// compiler, on a goroutine the runtime owns (wasmRuntime.Close and wasmModule.Close
// stop it), unless it has started already or the module was made by Compile. Instances
// made after it ends run the compiled code; instances already made keep the
// interpreter's until they are closed (wasmEntity moves an active entity over between
// messages). It returns the channel closed when the compilation has ended: CompileError
// then tells how. With the runtime's compilation cache, a module compiled before (by
// this process or an earlier one) loads from the cache in milliseconds.
func (m *wasmModule) CompileInBackground() <-chan struct{} {
	m.bg.once.Do(func() {
		rt := m.rt
		m.bg.mu.Lock()
		defer m.bg.mu.Unlock()
		if m.bg.closed || !rt.enter() {
			m.bg.err = fmt.Errorf("%w: compiling module %.12s", ErrRuntimeClosed, m.Digest)
			close(m.bg.done)
			return
		}
		rt.exit()
		ctx, cancel := context.WithCancel(rt.bg.Context())
		m.bg.cancel = cancel
		wasm := m.bg.rewritten
		started := rt.bg.Go(func() {
			defer cancel()
			start := time.Now()
			var compiled wazero.CompiledModule
			var err error
			if rt.compileHook != nil {
				err = rt.compileHook(ctx, m.Digest)
			}
			if err == nil {
				compiled, err = rt.r.CompileModule(ctx, wasm)
			}
			rt.tel.compileDur.Record(context.Background(), since(start), metric.WithAttributes(attrEngine.String("compiler-background")))
			m.bg.mu.Lock()
			defer m.bg.mu.Unlock()
			switch {
			case err != nil:
				m.bg.err = fmt.Errorf("host: compiling module %.12s: %w", m.Digest, err)
				if ctx.Err() == nil {
					rt.log.Error("module not compiled: its entities go on running on the interpreter", "digest", m.Digest[:12], "err", err)
				}
			case m.bg.closed:
				compiled.Close(context.Background())
				m.bg.err = fmt.Errorf("%w: module %.12s closed while compiling", ErrRuntimeClosed, m.Digest)
			default:
				m.code.Store(&moduleCode{r: rt.r, compiled: compiled})
				m.bg.rewritten = nil
				rt.markCompiled(m.Digest)
				rt.log.Debug("module compiled", "digest", m.Digest[:12], "took", time.Since(start))
			}
			close(m.bg.done)
		})
		if !started { // the runtime closed since enter
			cancel()
			m.bg.err = fmt.Errorf("%w: compiling module %.12s", ErrRuntimeClosed, m.Digest)
			close(m.bg.done)
		}
	})
	return m.bg.done
}

// Compiled returns the channel closed when the module's background compilation has
// ended (at once for a module made by Compile); CompileError then says whether it
// failed. It does not start the compilation (CompileInBackground does).
func (m *wasmModule) Compiled() <-chan struct{} { return m.bg.done }

// CompileError returns why the background compilation failed (the module's instances
// go on running on the interpreter), or nil: compiled, or not ended yet.
func (m *wasmModule) CompileError() error {
	select {
	case <-m.bg.done:
		return m.bg.err
	default:
		return nil
	}
}

// Interpreted reports whether new instances of the module run on the interpreter.
func (m *wasmModule) Interpreted() bool { return m.code.Load().interpreted }

// Engine names the engine of the module's new instances: "compiler", "interpreter"
// (compilation not started or under way), or "interpreter (compile failed)".
func (m *wasmModule) Engine() string {
	switch {
	case !m.Interpreted():
		return "compiler"
	case m.CompileError() != nil:
		return "interpreter (compile failed)"
	}
	return "interpreter"
}

// Close stops the module's background compilation and releases its compiled code.
// Instances already made keep working until closed.
func (m *wasmModule) Close(ctx context.Context) error {
	m.bg.mu.Lock()
	m.bg.closed = true
	if m.bg.cancel != nil {
		m.bg.cancel()
	}
	m.bg.mu.Unlock()
	m.bg.once.Do(func() { close(m.bg.done) }) // never started: it will not
	<-m.bg.done
	code := m.code.Load()
	err := code.compiled.Close(ctx)
	if m.interpreted != nil && m.interpreted != code {
		err = errors.Join(err, m.interpreted.compiled.Close(ctx))
	}
	if serr := m.snap.close(ctx); err == nil {
		err = serr
	}
	if m.rt.arena != nil {
		m.rt.arena.dropWarm(&m.hot)
		m.rt.arena.dropResident(m.resident.Swap(nil))
		if img := m.pre.image.Load(); img != nil && img.cow != nil {
			m.rt.arena.dropCowImage(img.cow)
		}
	}
	return err
}

var (
	i32 = api.ValueTypeI32
	// requiredExports are the functions every ABI v0 module exports, with their types.
	requiredExports = []struct {
		name            string
		params, results []api.ValueType
	}{
		{abi.ExportAlloc, []api.ValueType{i32}, []api.ValueType{i32}},
		{abi.ExportReceive, []api.ValueType{i32, i32}, []api.ValueType{i32}},
	}
	// optionalExports are the functions a module may export, with their types.
	optionalExports = []struct {
		name            string
		params, results []api.ValueType
	}{
		{abi.ExportInitialize, nil, nil},
		{abi.ExportSnapshot, nil, []api.ValueType{i32}},
		{abi.ExportRestore, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ExportMigrate, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ExportOnActivate, nil, []api.ValueType{i32}},
		{abi.ExportOnPassivate, nil, []api.ValueType{i32}},
		{abi.ExportQuery, []api.ValueType{i32, i32}, []api.ValueType{i32}},
		{abi.ExportHTTP, []api.ValueType{i32, i32}, []api.ValueType{i32}},
	}
	// abiVersions are the versions this host speaks: a module declares one.
	abiVersions = []int{0, 1}
)

// checkShape checks a module's exports and imports against abi/SPEC.md: it returns the
// ABI version the module declares and whether it exports shardhost_snapshot and
// shardhost_restore.
func checkShape(c wazero.CompiledModule) (version int, guestSnapshot bool, err error) {
	exports := c.ExportedFunctions()
	version = -1
	var markers, other []string
	for name := range exports {
		if !strings.HasPrefix(name, abi.MarkerPrefix) {
			continue
		}
		known := false
		for _, v := range abiVersions {
			if name == abi.VersionMarker(v) {
				version, known = v, true
			}
		}
		if known {
			markers = append(markers, name)
		} else {
			other = append(other, name)
		}
	}
	slices.Sort(markers)
	switch {
	case len(markers) > 1:
		return 0, false, fmt.Errorf("exports several ABI version markers (%s); a module declares one", strings.Join(markers, ", "))
	case len(markers) == 0 && len(other) > 0:
		slices.Sort(other)
		return 0, false, fmt.Errorf("built for another ABI version (%s); this host speaks v0 and v1", strings.Join(other, ", "))
	}
	_, start := exports["_start"]
	_, initialize := exports[abi.ExportInitialize]
	if start && !initialize {
		return 0, false, fmt.Errorf("a WASI command module (it exports _start and no %s): its main would run "+
			"and exit before any message, so no entity could run in it; build a WASI reactor instead: Go: "+
			"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; TinyGo: tinygo build -target=wasip1 "+
			"-buildmode=c-shared; Rust: crate-type = [\"cdylib\"] for wasm32-unknown-unknown", abi.ExportInitialize)
	}
	var missing []string
	if version < 0 {
		_, alloc := exports[abi.ExportAlloc]
		_, receive := exports[abi.ExportReceive]
		if alloc && receive {
			return 0, false, fmt.Errorf("missing export %s, the ABI version marker, while %s and %s are there: the "+
				"guest SDK exports it (Go: import github.com/shardhost/shardhost/guest-sdk/go and call sdk.Register "+
				"from init; Rust: the shardhost crate's entity! macro); a module written by hand exports an empty function "+
				"%s() to declare the ABI it speaks (abi/SPEC.md)", abi.VersionMarker(abi.Version), abi.ExportAlloc,
				abi.ExportReceive, abi.VersionMarker(abi.Version))
		}
		missing = append(missing, abi.VersionMarker(abi.Version))
	} else if def := exports[markers[0]]; len(def.ParamTypes()) != 0 || len(def.ResultTypes()) != 0 {
		return 0, false, fmt.Errorf("export %s has type %s, want ()->()", markers[0], signature(def.ParamTypes(), def.ResultTypes()))
	}
	for _, want := range requiredExports {
		def, ok := exports[want.name]
		if !ok {
			missing = append(missing, want.name)
			continue
		}
		if !slices.Equal(def.ParamTypes(), want.params) || !slices.Equal(def.ResultTypes(), want.results) {
			return 0, false, fmt.Errorf("export %s has type %s, want %s", want.name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(want.params, want.results))
		}
	}
	for _, want := range optionalExports {
		if def, ok := exports[want.name]; ok && (!slices.Equal(def.ParamTypes(), want.params) || !slices.Equal(def.ResultTypes(), want.results)) {
			return 0, false, fmt.Errorf("export %s has type %s, want %s", want.name,
				signature(def.ParamTypes(), def.ResultTypes()), signature(want.params, want.results))
		}
	}
	_, snap := exports[abi.ExportSnapshot]
	_, restore := exports[abi.ExportRestore]
	if snap != restore {
		return 0, false, fmt.Errorf("exports one of %s and %s: a module exports both or neither", abi.ExportSnapshot, abi.ExportRestore)
	}
	if _, migrate := exports[abi.ExportMigrate]; migrate && !restore {
		return 0, false, fmt.Errorf("exports %s without %s: a module that migrates a state also restores one", abi.ExportMigrate, abi.ExportRestore)
	}
	if len(missing) > 0 {
		return 0, false, fmt.Errorf("missing required exports %s (is it built with the shardhost guest SDK?)", strings.Join(missing, ", "))
	}
	if _, ok := c.ExportedMemories()["memory"]; !ok {
		return 0, false, errors.New(`missing exported memory "memory"`)
	}
	for _, imp := range c.ImportedFunctions() {
		mod, name, _ := imp.Import()
		switch mod {
		case wasi_snapshot_preview1.ModuleName:
		case abi.ImportModule:
			if _, ok := hostFunctionNames[name]; !ok {
				return 0, false, fmt.Errorf("imports unknown host function %s.%s", mod, name)
			}
			if version == 0 && !slices.Contains(abi.V0Imports, name) {
				return 0, false, fmt.Errorf("imports %s.%s, a host function of ABI v1, but declares v0", mod, name)
			}
		default:
			return 0, false, fmt.Errorf("imports %s.%s from a module the host does not provide", mod, name)
		}
	}
	return version, snap, nil
}

func signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return "(" + strings.Join(s, ",") + ")"
	}
	return names(params) + "->" + names(results)
}

// enter counts a use of an instance's memory (wasmRuntime.inflight); false once the runtime
// is closing. exit ends it.
func (rt *wasmRuntime) enter() bool {
	rt.inflight.Add(1)
	if rt.closing.Load() {
		rt.inflight.Add(-1)
		return false
	}
	return true
}

func (rt *wasmRuntime) exit() { rt.inflight.Add(-1) }

// firstLine keeps the first line of a (wazero) error text, without its stack trace.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
