// The communicator of a group of one process: every collective is the identity. In-process
// strategies compose their replicas' local group with it, so that one code path (the
// hierarchical one) serves one process and many.
#include "collective/factory.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

class SingleProcessCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string member_name(int) const override { return "this process"; }
  WorkHandle all_reduce(std::vector<at::Tensor>&, ReduceOp) override { return completed_work(); }
  WorkHandle broadcast(std::vector<at::Tensor>&, int) override { return completed_work(); }
  WorkHandle all_gather(const at::Tensor& input, at::Tensor* output) override {
    *output = input;
    return completed_work();
  }
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp) override {
    output.copy_(input);
    return completed_work();
  }
  WorkHandle barrier() override { return completed_work(); }
  WorkHandle send(const at::Tensor&, int to, int) override {
    throw InvalidArgument(detail::concat("send to process ", to, ": this group has one process"));
  }
  WorkHandle recv(at::Tensor&, int from, int) override {
    throw InvalidArgument(
        detail::concat("recv from process ", from, ": this group has one process"));
  }
  std::vector<std::string> exchange(const std::string&, const std::string& value) override {
    return {value};
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

}  // namespace dist::collective
