#include "train/committed_states.h"

#include <algorithm>

namespace dist::detail {

std::string CommittedStates::path_of(int64_t number) {
  return "/committed/" + std::to_string(number) + ".safetensors";
}

void CommittedStates::forget_front() {
  env_.remove_file(path_of(commits_.front().number));
  commits_.pop_front();
}

void CommittedStates::commit(const Checkpoint& checkpoint) {
  const int64_t number = latest() < 0 ? 1 : latest() + 1;
  checkpoint.write(path_of(number), &env_);
  commits_.push_back({number, checkpoint.state.step});
  while (commits_.size() > 2) forget_front();
}

bool CommittedStates::has(int64_t number) const {
  return std::any_of(commits_.begin(), commits_.end(),
                     [number](const Commit& c) { return c.number == number; });
}

void CommittedStates::restore(int64_t number, Checkpoint& checkpoint) {
  checkpoint.read(path_of(number), &env_);
  while (commits_.back().number != number) {
    env_.remove_file(path_of(commits_.back().number));
    commits_.pop_back();
  }
  commits_.back().step = checkpoint.state.step;  // unknown for a commit adopted as bytes
}

std::string CommittedStates::bytes_of(int64_t number) const {
  auto file = env_.new_random_access_file(path_of(number));
  std::string bytes(file->size(), '\0');
  file->read(0, bytes.size(), bytes.data());
  return bytes;
}

void CommittedStates::adopt(int64_t number, const std::string& bytes) {
  while (!commits_.empty()) forget_front();
  auto file = env_.new_writable_file(path_of(number));
  file->append(bytes.data(), bytes.size());
  file->close();
  commits_.push_back({number, -1});  // the step is read with it
}

}  // namespace dist::detail
