#pragma once
/// \file
/// Control of the preloaded heap, libreprise_heap.so (docs/HEAP_PRELOAD.md).
/// Run a program with `LD_PRELOAD=libreprise_heap.so` and its whole heap
/// (malloc and friends, hence new/delete) comes from one protected region at
/// a fixed address that these functions checkpoint incrementally and
/// restore. C and C++.
///
/// The functions are declared weak: a program calling them links without
/// the library. Without it they are null, so check `reprise_heap_available()`
/// first; calling one that is absent crashes.

#ifdef __cplusplus
extern "C" {
#endif

/// Starts a checkpoint of the heap and returns (the commit goes on in the
/// background unless REPRISE_HEAP_MODE=sync). Call it at a consistent point,
/// with no other thread writing the heap. The first call of any function
/// here sets the checkpoints up: REPRISE_HEAP_DIR must name their directory
/// (`%r` there becomes the rank the launcher gave the process), which no
/// other process may be using. 0, or -1 after a message on stderr.
__attribute__((weak)) int reprise_heap_checkpoint(void);

/// Waits until the newest checkpoint is safely in REPRISE_HEAP_DIR.
/// 0, or -1 after a message on stderr (for instance if the commit failed).
__attribute__((weak)) int reprise_heap_wait(void);

/// Replaces the heap with the newest checkpoint in REPRISE_HEAP_DIR (the
/// newest good one if newer ones are damaged, saying so on stderr), in a
/// process started anew: call it first thing in main(), before anything is
/// allocated (it refuses otherwise), then find the data via
/// `reprise_heap_root()`. 0; 1, silently, if REPRISE_HEAP_DIR holds no
/// checkpoint yet (a first run: start from scratch); or -1 after a message on
/// stderr, the heap then empty and usable.
__attribute__((weak)) int reprise_heap_restore(void);

/// Keeps `root` inside the heap, so that a restored process finds its data
/// (ignored before main() starts: the heap serves the program from there on).
__attribute__((weak)) void reprise_heap_set_root(void* root);

/// The pointer last given to `reprise_heap_set_root` (restored with the heap).
__attribute__((weak)) void* reprise_heap_root(void);

/// Whether libreprise_heap.so is loaded, so that the functions above exist.
static inline int reprise_heap_available(void) { return reprise_heap_checkpoint ? 1 : 0; }

#ifdef __cplusplus
}
#endif
