// The base of a communicator around another that decides how the other's collectives are
// issued (behind a mutex, on a thread of their own): it forwards what needs no order as it is,
// namely who is who, point to point (tagged), the store's exchange, abort and completes_in_call.
#pragma once

#include <string>
#include <vector>

#include "collective/communicator.h"

namespace dist::collective {

class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string member_name(int rank) const override { return inner_.member_name(rank); }
  WorkHandle send(const at::Tensor& tensor, int to, int tag) override {
    return inner_.send(tensor, to, tag);  // tagged: no order to keep
  }
  WorkHandle recv(at::Tensor& tensor, int from, int tag) override {
    return inner_.recv(tensor, from, tag);
  }
  std::vector<std::string> exchange(const std::string& key, const std::string& value) override {
    return inner_.exchange(key, value);  // the store, out of band
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  bool completes_in_call() const override { return inner_.completes_in_call(); }
  const char* backend_name() const override { return inner_.backend_name(); }

 protected:
  Communicator& inner_;  // borrowed: it outlives this one
};

}  // namespace dist::collective
