/* memprobe._heapsample: a sampled heap profile of Python's allocators.
 *
 * Allocations through PyMem_Malloc and PyObject_Malloc (the MEM and OBJ domains,
 * both called with the GIL held) are sampled by bytes, as Go's runtime, tcmalloc
 * and jemalloc do: a countdown drawn from an exponential distribution of mean R
 * (the interval) is decremented by each allocation's size; when it crosses zero,
 * that allocation is sampled, its pointer, size, weight and Python stack recorded.
 * An allocation of s bytes is sampled with probability p = 1 - exp(-s/R), and
 * given weight s / p, so the summed weight of the live samples of a stack is an
 * unbiased estimate of the live bytes allocated there. When a sampled pointer is
 * freed its record is dropped.
 *
 * The RAW domain (called without the GIL) is not hooked: pymalloc passes large
 * requests of the MEM and OBJ domains on to it, so hooking it too would count
 * them twice. What is missed: C code that calls PyMem_RawMalloc or malloc
 * directly, numpy's array buffers among them (memprobe's malloc and memray
 * probes see those).
 *
 * All state is touched only with the GIL held (the hooks of both domains, and
 * the module's functions), so it needs no lock: threads are serialized by the
 * GIL, and a fork() (made with the GIL held) copies a consistent table whose
 * pointers are as live in the child as in the parent.
 *
 * The tables are allocated with the C library's malloc, never through the
 * hooked allocators, and are bounded: at most MAX_SAMPLES live samples and
 * MAX_STACKS distinct stacks (a new stack past that is counted as dropped).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if PY_VERSION_HEX < 0x030B0000
#  include "frameobject.h"   /* PyFrameObject's fields before 3.11 */
#else
#  define Py_BUILD_CORE 1
#  include "internal/pycore_frame.h"
#  undef Py_BUILD_CORE
#endif

#define MAX_FRAMES 16
#define MAX_SAMPLES (1 << 20)
#define MAX_STACKS (1 << 14)

typedef struct { PyObject *filename; int lineno; } Frame;   /* filename: a strong ref */
typedef struct { uint64_t hash; int nframes; Frame frames[MAX_FRAMES]; } Stack;
typedef struct { uintptr_t ptr; size_t size; double weight; int32_t stack; } Sample;

static PyMemAllocatorEx wrapped_mem, wrapped_obj;  /* the allocators we wrap */
static PyMemAllocatorEx ours_mem, ours_obj;
static int installed, sampling;
static double interval = 512.0 * 1024.0;
/* Bytes before the next sample; when not sampling, so far off it is never reached. */
static int64_t countdown = INT64_MAX;
static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static int in_hook;                      /* re-entrancy guard (the GIL serializes) */

static Sample *samples;                  /* open addressing on ptr; ptr 0 = empty */
static size_t samples_cap, samples_live;
static Stack *stacks;                    /* append-only until compacted */
static size_t stacks_len;
static int32_t *stack_index;             /* open addressing on hash; -1 = empty */
static size_t stack_index_cap;
static uint64_t dropped;                 /* samples not recorded: a table was full */

/* A counting filter in front of the sample table: a free looks the table up only
 * when its pointer's slot counts a live sample. Pointers are 16-byte aligned, so
 * (p >> 4) spreads neighbours; with L live samples a never-sampled pointer goes to
 * the table with chance about L / FILTER_SLOTS (0.1% at 256 MiB live, 512 KiB). A
 * slot that reaches 255 stays there (never a false "not sampled"). Zero pages until
 * touched. */
#define FILTER_SLOTS (1 << 18)
static uint8_t filter[FILTER_SLOTS];
static inline size_t fslot(uintptr_t p) { return (size_t)(p >> 4) & (FILTER_SLOTS - 1); }

static int64_t draw(void)
{
    /* xorshift64*, then an exponential variate of mean `interval`. */
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    double u = (double)((rng * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
    double d = -log(1.0 - u) * interval;
    return d < 1.0 ? 1 : d > 1e15 ? (int64_t)1e15 : (int64_t)d;
}

static inline size_t ptr_slot(uintptr_t p, size_t cap)
{
    uint64_t h = (uint64_t)p * 0x9E3779B97F4A7C15ULL;
    return (size_t)(h >> 20) & (cap - 1);
}

/* ---- the sample table ---------------------------------------------------- */

static void samples_put(Sample s);

static int samples_grow(void)
{
    size_t old_cap = samples_cap, cap = old_cap ? old_cap * 2 : 1024;
    if (cap > 2 * (size_t)MAX_SAMPLES) return -1;   /* at most MAX_SAMPLES live */
    Sample *old = samples, *fresh = calloc(cap, sizeof(Sample));
    if (!fresh) return -1;
    samples = fresh; samples_cap = cap; samples_live = 0;
    memset(filter, 0, sizeof filter);   /* counted again as the records are put back */
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].ptr) samples_put(old[i]);
    free(old);
    return 0;
}

static void samples_put(Sample s)
{
    size_t i = ptr_slot(s.ptr, samples_cap);
    while (samples[i].ptr && samples[i].ptr != s.ptr) i = (i + 1) & (samples_cap - 1);
    if (!samples[i].ptr) {
        samples_live++;
        uint8_t *f = &filter[fslot(s.ptr)];
        if (*f < 255) (*f)++;
    }
    samples[i] = s;
}

/* Takes the record of `p` out, if it was sampled. Called only when p's filter slot
 * counts a live sample (a false positive costs this lookup: the table is kept at
 * most half full, so a miss is about two probes). */
static int samples_take(uintptr_t p, Sample *taken)
{
    uint8_t *f = &filter[fslot(p)];
    if (p == 0 || *f == 0) return 0;   /* 0 marks an empty slot: never a sample */
    size_t mask = samples_cap - 1, i = ptr_slot(p, samples_cap);
    while (samples[i].ptr != p) {
        if (!samples[i].ptr) return 0;
        i = (i + 1) & mask;
    }
    if (taken) *taken = samples[i];
    if (*f < 255) (*f)--;
    /* Backward-shift deletion keeps probe chains whole without tombstones: an entry
     * after the hole moves into it unless its home slot lies in (hole, entry]. */
    samples[i].ptr = 0; samples_live--;
    for (size_t j = (i + 1) & mask; samples[j].ptr; j = (j + 1) & mask) {
        size_t home = ptr_slot(samples[j].ptr, samples_cap);
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) { samples[i] = samples[j]; samples[j].ptr = 0; i = j; }
    }
    return 1;
}

/* ---- the stack table ----------------------------------------------------- */

static int read_stack(Stack *st)
{
    PyThreadState *ts = PyGILState_GetThisThreadState();
    st->nframes = 0;
    st->hash = 1469598103934665603ULL;
    if (!ts) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    _PyInterpreterFrame *f = ts->current_frame;
#elif PY_VERSION_HEX >= 0x030B0000
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#else
    PyFrameObject *f = ts->frame;
#endif
#if PY_VERSION_HEX >= 0x030B0000
#  define PREVIOUS(f) (f)->previous
#else
#  define PREVIOUS(f) (f)->f_back
#endif
    for (; f && st->nframes < MAX_FRAMES; f = PREVIOUS(f)) {
        PyCodeObject *code;
        int line;
#if PY_VERSION_HEX >= 0x030B0000
#  if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) continue;
#  endif
        if (_PyFrame_IsIncomplete(f)) continue;
#  if PY_VERSION_HEX >= 0x030D0000
        if (!PyCode_Check(f->f_executable)) continue;
        code = (PyCodeObject *)f->f_executable;
#  else
        code = f->f_code;
#  endif
        line = PyCode_Addr2Line(code, _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT));
#else
        code = f->f_code;
        line = PyFrame_GetLineNumber(f);
#endif
        Frame *fr = &st->frames[st->nframes++];
        fr->filename = code->co_filename;
        fr->lineno = line;
        st->hash = (st->hash ^ (uint64_t)(uintptr_t)fr->filename) * 1099511628211ULL;
        st->hash = (st->hash ^ (uint64_t)(unsigned)line) * 1099511628211ULL;
    }
    return 0;
}

static int stacks_equal(const Stack *a, const Stack *b)
{
    if (a->hash != b->hash || a->nframes != b->nframes) return 0;
    for (int i = 0; i < a->nframes; i++)
        if (a->frames[i].filename != b->frames[i].filename
            || a->frames[i].lineno != b->frames[i].lineno) return 0;
    return 1;
}

/* The index of `st` in the table, added if new; -1 when the table is full. */
static int32_t stacks_intern(const Stack *st)
{
    if (!stacks) {
        stacks = malloc(MAX_STACKS * sizeof(Stack));
        stack_index_cap = 2 * MAX_STACKS;
        stack_index = malloc(stack_index_cap * sizeof(int32_t));
        if (!stacks || !stack_index) {
            free(stacks); free(stack_index); stacks = NULL; stack_index = NULL;
            return -1;
        }
        memset(stack_index, 0xff, stack_index_cap * sizeof(int32_t));
    }
    size_t mask = stack_index_cap - 1, i = (size_t)(st->hash >> 7) & mask;
    while (stack_index[i] >= 0) {
        if (stacks_equal(&stacks[stack_index[i]], st)) return stack_index[i];
        i = (i + 1) & mask;
    }
    if (stacks_len >= MAX_STACKS) return -1;
    stacks[stacks_len] = *st;
    for (int k = 0; k < st->nframes; k++) Py_INCREF(st->frames[k].filename);
    stack_index[i] = (int32_t)stacks_len;
    return (int32_t)stacks_len++;
}

static void stacks_clear(void)
{
    for (size_t s = 0; s < stacks_len; s++)
        for (int k = 0; k < stacks[s].nframes; k++) Py_DECREF(stacks[s].frames[k].filename);
    stacks_len = 0;
    if (stack_index) memset(stack_index, 0xff, stack_index_cap * sizeof(int32_t));
}

/* ---- the hooks ----------------------------------------------------------- */

/* The hooks' fast paths are what every allocation pays, so each is the call through
 * the wrapped allocator (a tail call) plus one subtract-and-branch on the countdown
 * (malloc, calloc) or one load of the filter (free), or both (realloc). All else is
 * in the cold functions below, reached about once per interval bytes or per
 * filter hit. The countdown and the filter are plain globals: MEM and OBJ are only
 * called with the GIL held, so no atomics, no thread-state reads and no flag tests
 * are needed there (when not sampling, the countdown is too far off to be reached). */

#define COLD __attribute__((noinline, noipa, cold))

/* Records a sampled block, weighted size / P(sampled); 0 when the table is full. */
static int record(uintptr_t ptr, size_t size, int32_t stack)
{
    if (2 * (samples_live + 1) > samples_cap && samples_grow() < 0) return 0;
    double p = -expm1(-(double)size / interval);
    samples_put((Sample){ptr, size, p > 0 ? (double)size / p : interval, stack});
    return 1;
}

/* The countdown crossed zero at the allocation `ptr` of `size` bytes: draw the next
 * countdown and record this block with its stack. */
static void sample(void *ptr, size_t size)
{
    if (!sampling) { countdown = INT64_MAX; return; }
    countdown = draw();
    if (!ptr || in_hook) return;
    in_hook = 1;   /* nothing below allocates through PyMem, but be safe */
    Stack st;
    read_stack(&st);
    int32_t id = stacks_intern(&st);
    if (id < 0 || !record((uintptr_t)ptr, size, id)) dropped++;
    in_hook = 0;
}

/* The slow paths take the wrapped allocator's ctx, passed on unchanged. */
COLD static void *malloc_sampled(PyMemAllocatorEx *w, void *ctx, size_t n)
{
    void *p = w->malloc(ctx, n);
    sample(p, n);
    return p;
}

COLD static void *calloc_sampled(PyMemAllocatorEx *w, void *ctx, size_t k, size_t n)
{
    void *p = w->calloc(ctx, k, n);
    sample(p, k * n);
    return p;
}

/* A realloc whose old block may be sampled, or whose size crossed the countdown. A
 * sampled block keeps its record (and stack) as it moves, weighted for its new size;
 * a failed realloc leaves the old block, and its record, as they were. */
COLD static void *realloc_slow(PyMemAllocatorEx *w, void *ctx, void *old, size_t n)
{
    void *p = w->realloc(ctx, old, n);
    if (!p) return NULL;
    Sample was;
    if (samples_take((uintptr_t)old, &was)) {
        if (!record((uintptr_t)p, n, was.stack)) dropped++;
        if (countdown < 0) countdown = sampling ? draw() : INT64_MAX;
    } else if (countdown < 0) {
        sample(p, n);
    }
    return p;
}

COLD static void free_slow(PyMemAllocatorEx *w, void *ctx, void *p)
{
    samples_take((uintptr_t)p, NULL);
    w->free(ctx, p);
}

/* Our allocator of a domain has the wrapped one's ctx, so each hook hands the ctx it
 * is called with straight on (no load of it), and knows its domain by name. */
#define HOOKS(NAME)                                                            \
static void *NAME##_malloc(void *ctx, size_t n)                                \
{                                                                              \
    if (__builtin_expect((countdown -= (int64_t)n) >= 0, 1))                   \
        return wrapped_##NAME.malloc(ctx, n);                                  \
    return malloc_sampled(&wrapped_##NAME, ctx, n);                            \
}                                                                              \
static void *NAME##_calloc(void *ctx, size_t k, size_t n)                      \
{                                                                              \
    if (__builtin_expect((countdown -= (int64_t)(k * n)) < 0, 0))              \
        return calloc_sampled(&wrapped_##NAME, ctx, k, n);                     \
    return wrapped_##NAME.calloc(ctx, k, n);                                   \
}                                                                              \
static void *NAME##_realloc(void *ctx, void *old, size_t n)                    \
{                                                                              \
    if (__builtin_expect(((countdown -= (int64_t)n) < 0)                       \
                         | (filter[fslot((uintptr_t)old)] != 0), 0))           \
        return realloc_slow(&wrapped_##NAME, ctx, old, n);                     \
    return wrapped_##NAME.realloc(ctx, old, n);                                \
}                                                                              \
static void NAME##_free(void *ctx, void *p)                                    \
{                                                                              \
    if (__builtin_expect(filter[fslot((uintptr_t)p)] != 0, 0))                 \
        free_slow(&wrapped_##NAME, ctx, p);                                    \
    else                                                                       \
        wrapped_##NAME.free(ctx, p);                                           \
}

HOOKS(mem)
HOOKS(obj)

/* ---- the module ---------------------------------------------------------- */

static PyObject *hs_start(PyObject *Py_UNUSED(mod), PyObject *args)
{
    double r;
    if (!PyArg_ParseTuple(args, "d", &r)) return NULL;
    if (!(r >= 1.0 && r <= 1e12)) {
        PyErr_Format(PyExc_ValueError, "interval_bytes must be in [1, 1e12], got %R",
                     PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    interval = r;
    rng ^= (uint64_t)(uintptr_t)&r ^ (uint64_t)getpid() << 32;
    countdown = draw();   /* never a countdown drawn under the previous interval */
    if (!installed) {
        PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &wrapped_mem);
        PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &wrapped_obj);
        ours_mem = (PyMemAllocatorEx){wrapped_mem.ctx, mem_malloc, mem_calloc, mem_realloc, mem_free};
        ours_obj = (PyMemAllocatorEx){wrapped_obj.ctx, obj_malloc, obj_calloc, obj_realloc, obj_free};
        PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &ours_mem);
        PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &ours_obj);
        installed = 1;
    }
    sampling = 1;
    Py_RETURN_NONE;
}

static int ours_in_place(void)
{
    PyMemAllocatorEx m, o;
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &m);
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &o);
    return m.malloc == mem_malloc && o.malloc == obj_malloc;
}

static PyObject *hs_stop(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    sampling = 0;
    countdown = INT64_MAX;
    /* Unhook only if nobody (tracemalloc) hooked over us since: their wrapper
     * calls ours, which then stays as a pass-through. Records of live sampled
     * pointers are dropped: their frees go to the wrapped allocators either way. */
    if (installed && ours_in_place()) {
        PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &wrapped_mem);
        PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &wrapped_obj);
        installed = 0;
    }
    if (samples) memset(samples, 0, samples_cap * sizeof(Sample));
    memset(filter, 0, sizeof filter);
    samples_live = 0;
    stacks_clear();
    Py_RETURN_NONE;
}

/* [(frames, live_bytes, count)], frames most recent first as (filename, lineno),
 * as tracemalloc's raw traces give them. Compacts the stack table when it is
 * full of stacks with no live sample. */
static PyObject *hs_snapshot(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    double *bytes = calloc(stacks_len + 1, sizeof(double));
    size_t *counts = calloc(stacks_len + 1, sizeof(size_t));
    PyObject *out = PyList_New(0);
    if (!bytes || !counts || !out) goto fail;
    for (size_t i = 0; i < samples_cap; i++)
        if (samples[i].ptr) {
            bytes[samples[i].stack] += samples[i].weight;
            counts[samples[i].stack]++;
        }
    for (size_t s = 0; s < stacks_len; s++) {
        if (!counts[s]) continue;
        PyObject *frames = PyTuple_New(stacks[s].nframes);
        if (!frames) goto fail;
        for (int k = 0; k < stacks[s].nframes; k++) {
            PyObject *fr = Py_BuildValue("(Oi)", stacks[s].frames[k].filename,
                                         stacks[s].frames[k].lineno);
            if (!fr) { Py_DECREF(frames); goto fail; }
            PyTuple_SET_ITEM(frames, k, fr);
        }
        PyObject *row = Py_BuildValue("(Ndn)", frames, bytes[s], (Py_ssize_t)counts[s]);
        if (!row || PyList_Append(out, row) < 0) { Py_XDECREF(row); goto fail; }
        Py_DECREF(row);
    }
    free(bytes); free(counts);
    return out;
fail:
    free(bytes); free(counts); Py_XDECREF(out);
    return PyErr_Occurred() ? NULL : PyErr_NoMemory();
}

/* Forget the stacks no live sample holds, once the table is half full. */
static PyObject *hs_compact(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    if (stacks_len < MAX_STACKS / 2) Py_RETURN_NONE;
    int32_t *remap = malloc(stacks_len * sizeof(int32_t));
    if (!remap) return PyErr_NoMemory();
    memset(remap, 0xff, stacks_len * sizeof(int32_t));
    for (size_t i = 0; i < samples_cap; i++)
        if (samples[i].ptr) remap[samples[i].stack] = 0;
    size_t kept = 0;
    memset(stack_index, 0xff, stack_index_cap * sizeof(int32_t));
    for (size_t s = 0; s < stacks_len; s++) {
        if (remap[s] < 0) {
            for (int k = 0; k < stacks[s].nframes; k++) Py_DECREF(stacks[s].frames[k].filename);
            continue;
        }
        stacks[kept] = stacks[s];
        remap[s] = (int32_t)kept;
        size_t mask = stack_index_cap - 1, j = (size_t)(stacks[kept].hash >> 7) & mask;
        while (stack_index[j] >= 0) j = (j + 1) & mask;
        stack_index[j] = (int32_t)kept++;
    }
    for (size_t i = 0; i < samples_cap; i++)
        if (samples[i].ptr) samples[i].stack = remap[samples[i].stack];
    stacks_len = kept;
    free(remap);
    Py_RETURN_NONE;
}

static PyObject *hs_stats(PyObject *Py_UNUSED(mod), PyObject *Py_UNUSED(unused))
{
    size_t own = sizeof filter + samples_cap * sizeof(Sample)
        + (stacks ? MAX_STACKS * sizeof(Stack) + stack_index_cap * sizeof(int32_t) : 0);
    return Py_BuildValue("{s:O,s:O,s:n,s:n,s:d,s:n,s:K}",
                         "sampling", sampling ? Py_True : Py_False,
                         "hooked", installed && ours_in_place() ? Py_True : Py_False,
                         "live_samples", (Py_ssize_t)samples_live,
                         "stacks", (Py_ssize_t)stacks_len,
                         "interval_bytes", interval,
                         "own_bytes", (Py_ssize_t)own,
                         "dropped", (unsigned long long)dropped);
}

static PyMethodDef methods[] = {
    {"start", hs_start, METH_VARARGS, "start(interval_bytes): hook and sample every ~interval bytes."},
    {"stop", hs_stop, METH_NOARGS, "stop(): stop sampling, unhook if nobody hooked over us, forget."},
    {"snapshot", hs_snapshot, METH_NOARGS, "snapshot() -> [(frames, live_bytes, count)] per stack."},
    {"compact", hs_compact, METH_NOARGS, "compact(): forget stacks with no live sample."},
    {"stats", hs_stats, METH_NOARGS, "stats() -> dict of the sampler's state and own memory."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_heapsample",
    "A sampled heap profile of Python's MEM and OBJ allocators (see the C source).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__heapsample(void)
{
#ifdef Py_GIL_DISABLED
    PyErr_SetString(PyExc_ImportError, "_heapsample needs the GIL (not free-threaded)");
    return NULL;
#else
    return PyModule_Create(&module);
#endif
}
