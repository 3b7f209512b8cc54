// Helpers shared by the tests: temporary directories and small files.
#pragma once

#include <string>
#include <vector>

namespace dist::testing {

// The message of the E that fn() throws, or "no exception" when it throws none (any other
// exception propagates and fails the test).
template <class E, class Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "no exception";
}

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);
// The names of the entries of `directory`, sorted.
std::vector<std::string> files_in(const std::string& directory);

// Whether `what` occurs in `text`, and how many times (overlapping occurrences counted): for
// checking what processes printed.
bool contains(const std::string& text, const std::string& what);
int occurrences(const std::string& text, const std::string& what);

// The program's path on PATH (or in /usr/sbin, /usr/bin), empty if absent.
std::string find_program(const std::string& name);

}  // namespace dist::testing
