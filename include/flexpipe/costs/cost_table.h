// The stage cost table the simulator reads: time and memory of each stage's actions, the bytes that
// cross each stage boundary, the links between devices and the memory each device has.
// File format: docs/cost-table.md (JSON, "format": "flexpipe-costs", "version": 1).
#pragma once
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

namespace flexpipe {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Costs of one model chunk (stage within a pipeline), per micro-batch.
struct StageCosts {
  double forward = 1;           // F
  double backward_input = 1;    // I
  double backward_weight = 1;   // W
  double backward = 2;          // B (full backward); usually I + W
  double recompute = 1;         // R; usually F
  double optimizer = 0;         // OPT, once per step
  double activation_bytes = 1;  // saved by F for the backward, held until the backward ends
  double freed_by_input = 0;    // part of activation_bytes released when I ends; the rest when W ends
  double checkpoint_bytes = 0;  // kept from F to R when the stage recomputes (its input)
  double parameter_bytes = 0;   // weights, and a captured model's buffers and constants (never trained)
  double gradient_bytes = 0;
  double optimizer_bytes = 0;
  double output_bytes = 0;  // forward output sent to the next stage (and its gradient sent back)
  // What OFFLOAD moves to the host per micro-batch, capped by what the (stage, micro-batch) holds when
  // it is posted; infinity: everything it holds.
  double offload_bytes = kInfinity;
  // What R's rebuild holds at once when the backward is whole (B): the rebuild goes segment by
  // segment inside it, so the largest recompute segment. Infinity: activation_bytes, as when split.
  double rebuilt_peak_bytes = kInfinity;
  // What a recomputed micro-batch holds from R until its backward ends (checkpoints aside).
  double rebuilt_bytes(bool split_backward) const {
    return split_backward ? activation_bytes : std::min(activation_bytes, rebuilt_peak_bytes);
  }
  // Transient memory while one of the stage's computations (F, R, B, I, W) runs: its largest
  // operator's, such as the loss's fp32 copy of the logits.
  double workspace_bytes = 0;
  // Under a split backward, the checkpoints are released when W ends rather than I: a captured
  // model's runtime keeps them in the graphs it retains for W.
  bool checkpoint_until_weight = false;
  friend bool operator==(const StageCosts&, const StageCosts&) = default;
};

struct Link {
  double latency = 0;
  double bandwidth = kInfinity;  // bytes per time unit
  // Host time a message takes from the devices at its ends, where the transport runs on their CPU
  // (Gloo over TCP: packing, posting, copying): unlike latency and bandwidth, which delay only the
  // data, it delays the device's next action. The sender pays it at SEND, the receiver at RECV; 0
  // for a transport that copies on engines of its own (NCCL on GPUs).
  double send_cpu = 0;               // per message, on the sender
  double receive_cpu = 0;            // per message, on the receiver
  double cpu_bandwidth = kInfinity;  // bytes per time unit either end copies on top of the above
  // A transport with a rendezvous (Gloo's TCP pairs) writes a message only once the receiver has
  // posted its receive: a message handed over before that arrives `rendezvous` after the RECV
  // begins (the receiver's notice going out, the sender's transport thread writing, the data coming
  // back), and one handed over after it a latency after its SEND. 0: the transport takes early
  // messages eagerly, and every message arrives a latency after its SEND.
  double rendezvous = 0;
  double transfer_time(double bytes) const { return latency + (bytes > 0 ? bytes / bandwidth : 0.0); }
  double send_cpu_time(double bytes) const { return send_cpu + (bytes > 0 ? bytes / cpu_bandwidth : 0.0); }
  double receive_cpu_time(double bytes) const { return receive_cpu + (bytes > 0 ? bytes / cpu_bandwidth : 0.0); }
  bool uses_cpu() const { return send_cpu > 0 || receive_cpu > 0 || cpu_bandwidth < kInfinity; }
  friend bool operator==(const Link&, const Link&) = default;
};

// A host link with no bandwidth: the device cannot offload (a table's "host_link": null).
inline constexpr Link kNoHostLink{0, 0, 0, 0, kInfinity};

struct LinkOverride {
  int src = 0;
  int dst = 0;
  Link link;
  friend bool operator==(const LinkOverride&, const LinkOverride&) = default;
};

struct CostTable {
  std::vector<StageCosts> stages;  // one per model chunk
  Link link;                       // between any two devices of one node unless overridden
  // Two levels, nodes of devices: devices d and e share a node when d / devices_per_node equals
  // e / devices_per_node, and talk over `inter_node_link` otherwise. 0: one node, `link` everywhere.
  int devices_per_node = 0;
  Link inter_node_link;
  std::vector<LinkOverride> pairs;      // per directed device pair, over both of the above
  Link host_link;                       // device <-> host, for OFFLOAD / RELOAD; kNoHostLink: none
  std::vector<double> memory_capacity;  // per device; empty: unlimited; one value: every device
  double overlap_ratio = 1.0;           // an Overlap F&B unit takes overlap_ratio * (F + B)
  std::string time_unit = "unit";
  std::string memory_unit = "unit";

  const Link& link_between(int src, int dst) const;  // the pair's override, else by node
  bool same_node(int a, int b) const { return devices_per_node <= 0 || a / devices_per_node == b / devices_per_node; }
  double capacity(int device) const;  // kInfinity when unlimited
  friend bool operator==(const CostTable&, const CostTable&) = default;
};

// The `--uniform-costs F,I,W[,COMM]` shorthand: every stage takes F, I, W (B = I + W, R = F), holds
// 1 unit of activation memory from F until its backward ends, parameters count 0, and every
// transfer takes COMM.
CostTable uniform_costs(int stages_per_pipeline, double forward, double backward_input, double backward_weight,
                        double comm = 0);
// Parses "F,I,W[,COMM]"; throws Error naming the bad field.
CostTable parse_uniform_costs(const std::string& text, int stages_per_pipeline);

// Why the table does not fit a schedule with this many chunks and devices ("ORIGIN: ..."); empty when it fits.
std::string cost_table_problem(const CostTable& costs, int stages_per_pipeline, int devices, const std::string& origin);
// Throws Error with cost_table_problem's message unless the table fits.
void check_cost_table(const CostTable& costs, int stages_per_pipeline, int devices, const std::string& origin);

}  // namespace flexpipe
