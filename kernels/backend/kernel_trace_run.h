// One engine step's attention launch traced on the emulated device (issue #45): the Simulator,
// built with the CUDA backend on the SIMT emulator (--backend cuda-sim), runs its next step with
// a memory recorder installed (kernels/sim/memory_trace.h) for one layer's attention launch and
// the KV write launches before it, and the launches are summarized (kernels/sim/kernel_trace.h)
// with each of its queries, and each token written, named by the request it belongs to. kvscope
// trace kernel writes it as kernel_trace.json (kernel_trace_json).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/sched/simulator.h"
#include "kernels/backend/attention_timing.h"
#include "kernels/sim/kernel_trace.h"

namespace kvscope {

struct StepKernelTrace {
  int step = 0;   // the step traced, as the UI, captions and recordings number it (0: the first)
  int layer = 0;  // whose attention launch
  int layers = 0;
  int attention_launches = 0;     // the step's, every layer (one per layer on the batch path)
  sim::TraceLaunch launch;        // the layer's attention launch, recorded
  sim::KernelTrace summary;       // of it
  std::vector<sim::dim3> reduce;  // the split-K reductions that followed it (grid of each)
  std::vector<std::string> reduce_kernels;
  std::vector<int> query_request;  // per query of the launch: its request, or -1 (none matched)
  struct Table {
    int request = 0;
    int num_tokens = 0;
    std::vector<int> blocks;
  };
  // Each running request's table as the step's kernels read it (taken at its first attention
  // launch; after the step, or before it, for a request that had none then).
  std::vector<Table> block_tables;
  std::string k_format, v_format;
  int block_size = 0, n_heads = 0, kv_heads = 0, head_dim = 0;

  // The layer's KV write launches before its attention: one per new token of the step (two for
  // int4 / int2, a row each), each storing the token's K and V rows into its slot.
  struct KvWrite {
    std::string kernel;
    sim::dim3 grid, block;
    int request = -1;     // whose token (-1: none matched)
    int slot = 0;         // the token's slot in its sequence
    int kv_block = -1;    // the physical block written
    std::string rows;     // "K and V", "K" or "V"
    sim::Traffic stores;  // codes and scales written (warp stores, sectors, ideal)
    sim::Traffic table;   // the block-table entry read
  };
  std::vector<KvWrite> writes;
  sim::Traffic write_total;  // the stores of every write launch
};

// Runs `sim`'s next step, recording layer `layer`'s attention launch. Throws kvscope::Error
// naming --layer for a layer the model lacks, and naming `where` (the scenario) when the step ran
// no attention launch on the emulator: the CPU backend ran it, the run has finished, the cache
// is MLA's (latent kernels), or contexts past 4,096 slots took the per-query path (not traced
// yet).
StepKernelTrace trace_next_step(Simulator& sim, int layer, const std::string& where);

// The traced launch's shape as a device timing is matched on (attention_timing.h): its formats,
// block size, heads, and each query's context.
LaunchShape launch_shape(const StepKernelTrace& t);

// kernel_trace.json: the launch's shape, each thread block's role, KV blocks read, bytes and
// transactions, the block tables, totals, and the first `warp_sample` warp loads of block 0.
nlohmann::json kernel_trace_json(const StepKernelTrace& t, std::size_t warp_sample);

}  // namespace kvscope
