// PendingWork, the ProcessCollectives a hook sees, and a hook as the reducer's
// PackCommunication (communication_hook.h, gradient_reducer.h).
#include "dist/distribute/communication_hook.h"

#include <map>
#include <mutex>

#include "collective/communicator.h"
#include "distribute/reduction/gradient_reducer.h"

namespace dist {

struct PendingWork::State {
  std::mutex mu;
  std::function<void()> finish;  // emptied once run
  std::exception_ptr failure;
};

PendingWork::PendingWork(std::function<void()> finish) : state_(std::make_shared<State>()) {
  state_->finish = std::move(finish);
}

void PendingWork::wait() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (state_->finish) {
    auto finish = std::move(state_->finish);
    state_->finish = nullptr;
    try {
      finish();
    } catch (...) {
      state_->failure = std::current_exception();
    }
  }
  if (state_->failure) std::rethrow_exception(state_->failure);
}

namespace {

PendingWork pending(collective::WorkHandle work) {
  return PendingWork([work = std::move(work)] { work->wait(); });
}

class CommunicatorCollectives : public ProcessCollectives {
 public:
  explicit CommunicatorCollectives(collective::Communicator& communicator)
      : communicator_(communicator) {}
  int rank() const override { return communicator_.rank(); }
  int size() const override { return communicator_.size(); }
  PendingWork all_reduce_sum(at::Tensor& tensor) override {
    std::vector<at::Tensor> one{tensor};
    return pending(communicator_.all_reduce(one, ReduceOp::kSum));
  }
  PendingWork send(const at::Tensor& tensor, int to, int tag) override {
    return pending(communicator_.send(tensor, to, tag));
  }
  PendingWork recv(at::Tensor& tensor, int from, int tag) override {
    return pending(communicator_.recv(tensor, from, tag));
  }

 private:
  collective::Communicator& communicator_;
};

// A hook's work as the reducer waits for it; keeps the collectives it may still use.
class HookWork : public collective::Work {
 public:
  HookWork(std::shared_ptr<ProcessCollectives> processes, PendingWork work)
      : processes_(std::move(processes)), work_(std::move(work)) {}
  // The communicator's timeout bounds every collective the hook waits for.
  void wait(std::chrono::milliseconds /*deadline*/) override {
    work_.wait();
    done_ = true;
  }
  bool is_completed() override { return done_; }

 private:
  std::shared_ptr<ProcessCollectives> processes_;
  PendingWork work_;
  bool done_ = false;
};

}  // namespace

PackCommunication communicate_through(std::shared_ptr<CommunicationHook> hook, int64_t min_bytes) {
  if (!hook) return all_reduce_pack;
  if (min_bytes < 0) min_bytes = hook->min_pack_bytes();
  // One ProcessCollectives per communicator, for every pack: a hook may key state by it.
  auto mu = std::make_shared<std::mutex>();
  auto made = std::make_shared<
      std::map<collective::Communicator*, std::shared_ptr<CommunicatorCollectives>>>();
  return
      [hook = std::move(hook), mu, made, min_bytes](collective::Communicator& cross_process,
                                                    GradientPack& pack) -> collective::WorkHandle {
        // Too small to gain: every process decides alike (the same packs, the same threshold).
        if (pack.buffer.numel() * static_cast<int64_t>(pack.buffer.element_size()) < min_bytes)
          return all_reduce_pack(cross_process, pack);
        std::shared_ptr<CommunicatorCollectives> processes;
        {
          std::lock_guard<std::mutex> lock(*mu);
          auto& slot = (*made)[&cross_process];
          if (!slot) slot = std::make_shared<CommunicatorCollectives>(cross_process);
          processes = slot;
        }
        PendingWork work = hook->reduce(*processes, pack);
        return std::make_shared<HookWork>(std::move(processes), std::move(work));
      };
}

}  // namespace dist
