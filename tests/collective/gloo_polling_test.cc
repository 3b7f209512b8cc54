// How long a Gloo collective's wait polls before it blocks: only while the group's members on
// this host have a core each, unless DIST_COLLECTIVE_POLL_MS says otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "collective/gloo/gloo_transport.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using std::chrono::milliseconds;

// `local` members on 127.0.0.1 and `remote` on other hosts; this process is rank 0.
ProcessGroupSpec group(int local, int remote) {
  ProcessGroupSpec spec;
  for (int i = 0; i < local; ++i)
    spec.members.push_back({"worker:" + std::to_string(i), HostPort{"127.0.0.1", 5000 + i}});
  for (int i = 0; i < remote; ++i)
    spec.members.push_back(
        {"worker:" + std::to_string(local + i), HostPort{"10.0.0." + std::to_string(i + 2), 5000}});
  return spec;
}

// Restores the variable's absence at the end of a test.
struct PollVariable {
  explicit PollVariable(const char* value) { setenv("DIST_COLLECTIVE_POLL_MS", value, 1); }
  ~PollVariable() { unsetenv("DIST_COLLECTIVE_POLL_MS"); }
};

TEST(GlooPollingTest, MembersWithACoreEachPollAndMoreMembersThanCoresBlockAtOnce) {
  unsetenv("DIST_COLLECTIVE_POLL_MS");
  EXPECT_GT(gloo_poll_before_blocking(group(2, 0), 2), milliseconds(0));
  EXPECT_EQ(gloo_poll_before_blocking(group(3, 0), 2), milliseconds(0));
  EXPECT_EQ(gloo_poll_before_blocking(group(4, 0), 2), milliseconds(0));
  // Members on other hosts take none of this host's cores.
  EXPECT_GT(gloo_poll_before_blocking(group(1, 7), 2), milliseconds(0));
  EXPECT_GT(gloo_poll_before_blocking(group(2, 30), 2), milliseconds(0));
  EXPECT_EQ(gloo_poll_before_blocking(group(3, 1), 2), milliseconds(0));
}

TEST(GlooPollingTest, TheVariableOverridesTheChoice) {
  {
    PollVariable never("0");
    EXPECT_EQ(gloo_poll_before_blocking(group(2, 0), 8), milliseconds(0));
  }
  {
    PollVariable long_poll("35");
    EXPECT_EQ(gloo_poll_before_blocking(group(4, 0), 2), milliseconds(35));
  }
}

TEST(GlooPollingTest, AMeaninglessValueIsRefusedNamingTheVariable) {
  for (const char* bad : {"x", "-1", "20ms", "60001", "1e3"}) {
    PollVariable variable(bad);
    try {
      gloo_poll_before_blocking(group(2, 0), 2);
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("DIST_COLLECTIVE_POLL_MS is '" + std::string(bad)),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("from 0 to 60000"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dist::collective
