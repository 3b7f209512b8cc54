// The PowerSGD hook (gradient_compression.h; Vogels, Karimireddy and Jaggi, 2019). Per pack,
// during backward: M = G + E for every compressed gradient, P = M Q, one all-reduce of every
// P and one of the uncompressed gradients; after backward: P orthonormalized, Q = M^T P, one
// all-reduce of every Q, then G = P Q^T and E = M - G / N.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "dist/core/error.h"
#include "dist/distribute/gradient_compression.h"

namespace dist {
namespace {

// Gram-Schmidt on the columns of `matrix` (n x r), in place.
void orthonormalize(at::Tensor& matrix) {
  const int64_t columns = matrix.size(1);
  for (int64_t c = 0; c < columns; ++c) {
    at::Tensor column = matrix.select(1, c);
    // A zero column stays zero (PowerSGD's implementations add a tiny epsilon instead).
    const float norm = column.norm().item<float>();
    if (norm > 0.0f) column.div_(norm);
    if (c + 1 == columns) break;
    at::Tensor rest = matrix.narrow(1, c + 1, columns - c - 1);
    rest.sub_(column.unsqueeze(1) * column.unsqueeze(0).mm(rest));
  }
}

// The sum over the processes of `tensor`, in place; nothing to wait for when it is empty.
PendingWork sum_unless_empty(ProcessCollectives& processes, at::Tensor& tensor) {
  return tensor.numel() > 0 ? processes.all_reduce_sum(tensor) : PendingWork();
}

// A gradient seen as an n x m matrix, compressed when that saves enough.
struct Shape {
  int64_t rows = 0, columns = 0;
};

Shape matrix_shape(const at::Tensor& gradient) {
  if (gradient.dim() < 2) return {};
  return {gradient.size(0), gradient.numel() / gradient.size(0)};
}

// One compressed gradient of a pack in flight.
struct Compressed {
  std::string name;
  at::Tensor gradient;  // the pack's view
  at::Tensor m;         // rows x columns: gradient + error (the error memory itself)
  at::Tensor add;       // rows x columns: the gradient still to add to m (E + G), if any
  at::Tensor p;         // rows x rank: a view of the pack's P buffer
  at::Tensor q;         // columns x rank: a view of the pack's Q buffer
};

// The passes over M go by blocks of rows of about 256K elements (1 MB of float): M = E + G then
// P = M Q on a block while it is in cache, and later G = P Q^T then E = M - G / N, where whole
// matrices cost a pass over memory each (on the MLP's 67 MB layer, 5 passes a step). Row r of P
// and of G depends on row r of M only. Calls `body(first_row, rows)` for each block of rows of
// an n x m matrix, in order.
template <typename Body>
void for_row_blocks(const at::Tensor& matrix, Body body) {
  const int64_t rows = matrix.size(0);
  const int64_t block =
      std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(matrix.size(1), 1));
  for (int64_t r = 0; r < rows; r += block) body(r, std::min(block, rows - r));
}

// M = M + add (when `c.add` is defined), then P = M Q, a block of rows at a time.
void add_and_project(const Compressed& c, at::Tensor& p) {
  for_row_blocks(c.m, [&](int64_t r, int64_t n) {
    at::Tensor m = c.m.narrow(0, r, n);
    if (c.add.defined()) m.add_(c.add.narrow(0, r, n));
    at::Tensor p_rows = p.narrow(0, r, n);
    at::mm_out(p_rows, m, c.q);
  });
}

// G = P Q^T into `result`, and with error feedback E = M - G / N, a block of rows at a time.
void decompress(const Compressed& c, at::Tensor& result, bool error_feedback, float processes) {
  for_row_blocks(c.m, [&](int64_t r, int64_t n) {
    at::Tensor g = result.narrow(0, r, n);
    at::mm_out(g, c.p.narrow(0, r, n), c.q.t());
    if (error_feedback) c.m.narrow(0, r, n).sub_(g, 1.0f / processes);
  });
}

// A pack's state across steps.
struct PackState {
  const ProcessCollectives* processes = nullptr;  // the job this state belongs to
  int64_t steps = 0;
  std::map<std::string, at::Tensor> q;      // by parameter name: the last Q
  std::map<std::string, at::Tensor> error;  // by parameter name: E
};

// One pack's step in flight: what reduce() prepared and finish() completes.
struct PackStep {
  std::vector<Compressed> compressed;
  std::vector<at::Tensor> plain;  // the pack's views of the gradients summed as they are
  at::Tensor p, q, rest;          // flat: every P, every Q, the plain gradients
  PackState* state = nullptr;     // a node of packs_: it stays put
};

class PowerSgdHook : public CommunicationHook {
 public:
  explicit PowerSgdHook(PowerSgdOptions options) : options_(options) {
    DIST_CHECK_ARG(options_.rank >= 1, "PowerSGD rank must be at least 1, got ", options_.rank);
    DIST_CHECK_ARG(options_.start_step >= 0, "PowerSGD start_step must be at least 0, got ",
                   options_.start_step);
  }
  std::string name() const override { return "powersgd:" + std::to_string(options_.rank); }
  // Measured across 2 hosts at 1 Gbit/s (docs/hosts-scaling.md, "Compression only where it
  // pays"): the tutorial CNN's one pack of 0.5 MB ran at 0.66 of uncompressed, the MLP's of 13
  // and 67 MB at 2.4x.
  int64_t min_pack_bytes() const override { return int64_t{1} << 20; }

  PendingWork reduce(ProcessCollectives& processes, GradientPack& pack) override;
  std::map<std::string, at::Tensor> state() const override;
  void load_state(const std::map<std::string, at::Tensor>& state) override;

 private:
  bool worth_compressing(const at::Tensor& gradient) const {
    const Shape s = matrix_shape(gradient);
    return s.rows * s.columns > 2 * (s.rows + s.columns) * options_.rank;
  }
  // Q to start from for `name`: the last one (warm start) or a seeded draw, orthonormalized.
  at::Tensor starting_q(PackState& state, const GradientPack& pack, size_t position,
                        int64_t columns) const;
  // M and Q of gradient `position` of `pack`, from this process's error feedback.
  Compressed start_compressing(PackState& state, const GradientPack& pack, size_t position) const;
  void finish(ProcessCollectives& processes, PackStep& step);

  PowerSgdOptions options_;
  mutable std::mutex mu_;
  std::map<std::pair<int, size_t>, PackState> packs_;  // by (model, pack)
};

at::Tensor PowerSgdHook::starting_q(PackState& state, const GradientPack& pack, size_t position,
                                    int64_t columns) const {
  const std::string& name = pack.names[position];
  auto it = state.q.find(name);
  if (options_.warm_start && it != state.q.end()) return it->second;
  // The same draw on every process: the seed, the model, the pack, the gradient and (without
  // warm start) the step decide it.
  const uint64_t seed = options_.seed * 1000003u + static_cast<uint64_t>(pack.model) * 7919u +
                        pack.index * 104729u + position * 31u +
                        (options_.warm_start ? 0u : static_cast<uint64_t>(state.steps) << 32);
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  at::Tensor q = at::randn({columns, options_.rank}, generator, at::kFloat);
  orthonormalize(q);
  return q;
}

PendingWork PowerSgdHook::reduce(ProcessCollectives& processes, GradientPack& pack) {
  std::unique_lock<std::mutex> lock(mu_);
  PackState& state = packs_[{pack.model, pack.index}];
  if (state.processes == nullptr) state.processes = &processes;
  DIST_CHECK_ARG(state.processes == &processes, "this PowerSGD hook already compresses model ",
                 pack.model,
                 "'s gradients for another strategy (its error feedback is kept per "
                 "model and pack): give each strategy a PowerSGD hook of its own");
  if (state.steps++ < options_.start_step) return processes.all_reduce_sum(pack.buffer);
  auto step = std::make_shared<PackStep>();
  step->state = &state;
  int64_t p_size = 0, q_size = 0;
  for (size_t i = 0; i < pack.gradients.size(); ++i) {
    if (!worth_compressing(pack.gradients[i])) {
      step->plain.push_back(pack.gradients[i]);
      continue;
    }
    step->compressed.push_back(start_compressing(state, pack, i));
    p_size += step->compressed.back().m.size(0) * options_.rank;
    q_size += step->compressed.back().m.size(1) * options_.rank;
  }
  step->p = at::empty({p_size}, at::kFloat);
  step->q = at::empty({q_size}, at::kFloat);
  int64_t p_at = 0, q_at = 0;
  for (auto& c : step->compressed) {
    const int64_t rows = c.m.size(0), columns = c.m.size(1);
    at::Tensor p = step->p.narrow(0, p_at, rows * options_.rank).view({rows, options_.rank});
    at::Tensor q = step->q.narrow(0, q_at, columns * options_.rank).view({columns, options_.rank});
    add_and_project(c, p);
    q.copy_(c.q);
    c.p = p;
    c.q = q;
    p_at += rows * options_.rank;
    q_at += columns * options_.rank;
  }
  std::vector<at::Tensor> flat;
  for (const auto& g : step->plain) flat.push_back(g.reshape(-1));
  step->rest = flat.empty() ? at::empty({0}, at::kFloat) : at::cat(flat);
  lock.unlock();
  // Every process packs the same gradients, so all skip the same empty sums: a pack of one
  // matrix (the MLP's 67 MB layer) has no plain rest, and each collective costs a round trip
  // and its agreement's (18 ms a step across 2 hosts at 1 Gbit/s for the empty one).
  PendingWork p_sum = sum_unless_empty(processes, step->p);
  PendingWork rest_sum = sum_unless_empty(processes, step->rest);
  return PendingWork([this, &processes, step, p_sum, rest_sum]() mutable {
    rest_sum.wait();
    int64_t at = 0;
    for (auto& g : step->plain) {
      g.copy_(step->rest.narrow(0, at, g.numel()).view(g.sizes()));
      at += g.numel();
    }
    p_sum.wait();
    finish(processes, *step);
  });
}

Compressed PowerSgdHook::start_compressing(PackState& state, const GradientPack& pack,
                                           size_t position) const {
  const at::Tensor& gradient = pack.gradients[position];
  const Shape s = matrix_shape(gradient);
  Compressed c{pack.names[position], gradient, gradient.reshape({s.rows, s.columns}), {}, {}, {}};
  // M lives in the error feedback's memory, updated in place (no 80 MB allocations a step on
  // the MLP); without error feedback it is the gradient itself.
  if (options_.error_feedback) {
    auto error = state.error.find(c.name);
    if (error == state.error.end()) {
      error = state.error.emplace(c.name, c.m.clone()).first;
    } else {
      DIST_CHECK_ARG(error->second.sizes() == c.m.sizes(), "PowerSGD's state for parameter '",
                     c.name, "' has shape ", error->second.sizes(), " but its gradient is ",
                     c.m.sizes(), ": the state was saved for another model");
      c.add = c.m;  // E + G, row block by row block with P = M Q (add_and_project)
    }
    c.m = error->second;
  }
  c.q = starting_q(state, pack, position, s.columns);
  return c;
}

void PowerSgdHook::finish(ProcessCollectives& processes, PackStep& step) {
  for (auto& c : step.compressed) {
    orthonormalize(c.p);
    at::mm_out(c.q, c.m.t(), c.p);
  }
  sum_unless_empty(processes, step.q).wait();
  const float processes_count = static_cast<float>(processes.size());
  PackState& state = *step.state;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& c : step.compressed) {
    // The gradient's memory holds M only without error feedback, and a row of M is used up
    // once its row of G is computed.
    at::Tensor result = c.gradient.view({c.m.size(0), c.m.size(1)});
    decompress(c, result, options_.error_feedback, processes_count);
    state.q[c.name] = c.q.clone();
  }
}

std::map<std::string, at::Tensor> PowerSgdHook::state() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, at::Tensor> saved;
  for (const auto& [key, pack] : packs_) {
    const std::string prefix =
        "model" + std::to_string(key.first) + "/pack" + std::to_string(key.second) + "/";
    saved[prefix + "steps"] = at::tensor({pack.steps}, at::kLong);
    for (const auto& [name, q] : pack.q) saved[prefix + "q/" + name] = q;
    for (const auto& [name, e] : pack.error) saved[prefix + "error/" + name] = e;
  }
  return saved;
}

void PowerSgdHook::load_state(const std::map<std::string, at::Tensor>& saved) {
  std::map<std::pair<int, size_t>, PackState> packs;
  for (const auto& [key, value] : saved) {
    int model = -1;
    size_t pack = 0;
    int consumed = 0;
    const bool parsed =
        std::sscanf(key.c_str(), "model%d/pack%zu/%n", &model, &pack, &consumed) == 2 &&
        consumed > 0;
    DIST_CHECK_ARG(parsed && model >= 0, "PowerSGD state: '", key,
                   "' is not a name PowerSGD's state() gives (model<M>/pack<K>/...)");
    PackState& state = packs[{model, pack}];
    const std::string rest = key.substr(static_cast<size_t>(consumed));
    if (rest == "steps") {
      state.steps = value.item<int64_t>();
    } else if (rest.rfind("q/", 0) == 0) {
      state.q[rest.substr(2)] = value.clone();
    } else if (rest.rfind("error/", 0) == 0) {
      state.error[rest.substr(6)] = value.clone();
    } else {
      DIST_CHECK_ARG(false, "PowerSGD state: '", key, "' names no steps, q/ or error/ entry");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  packs_ = std::move(packs);
}

}  // namespace

std::shared_ptr<CommunicationHook> powersgd(PowerSgdOptions options) {
  return std::make_shared<PowerSgdHook>(options);
}

}  // namespace dist
