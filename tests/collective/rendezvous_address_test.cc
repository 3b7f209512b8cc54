// --rendezvous and DIST_RENDEZVOUS (dist/collective/rendezvous_address.h): the built-in store
// when empty, an etcd cluster's members and the job's key prefix otherwise, and a message that
// names the text, what is wrong and the form to write for anything else.
#include <gtest/gtest.h>

#include "dist/collective/rendezvous_address.h"
#include "dist/core/error.h"
#include "expect_error.h"
#include "test_util.h"

namespace dist {
namespace {

TEST(RendezvousAddressTest, EmptyIsTheBuiltInStore) {
  const RendezvousAddress address = parse_rendezvous_address("");
  EXPECT_FALSE(address.is_etcd());
  EXPECT_EQ(address.to_string(), "the built-in store");
}

TEST(RendezvousAddressTest, AnEtcdUrlGivesItsMembersAndAPrefixEndingInASlash) {
  const RendezvousAddress address =
      parse_rendezvous_address("etcd://10.0.0.1:2379,etcd-b:2380,[::1]:2379/dist/job-7");
  ASSERT_TRUE(address.is_etcd());
  ASSERT_EQ(address.etcd_members.size(), 3u);
  EXPECT_EQ(address.etcd_members[0].host, "10.0.0.1");
  EXPECT_EQ(address.etcd_members[0].port, 2379);
  EXPECT_EQ(address.etcd_members[1].to_string(), "etcd-b:2380");
  EXPECT_EQ(address.etcd_members[2].host, "[::1]");
  EXPECT_EQ(address.etcd_prefix, "/dist/job-7/");
  EXPECT_EQ(address.to_string(), "etcd://10.0.0.1:2379,etcd-b:2380,[::1]:2379/dist/job-7/");
  EXPECT_EQ(parse_rendezvous_address("etcd://h:1/p/").etcd_prefix, "/p/");
}

TEST(RendezvousAddressTest, AnythingElseIsNamedWithWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"http://h:2379/p", "does not begin with etcd://"},
      {"etcd://h:2379", "names no key prefix"},
      {"etcd://h:2379/", "the key prefix is empty"},
      {"etcd:///p", "an etcd member's address is empty"},
      {"etcd://h:2379,/p", "an etcd member's address is empty"},
      {"etcd://h/p", "'h' is not host:port"},
      {"etcd://h:port/p", "has no numeric port"},
      {"etcd://h:70000/p", "outside 1..65535"},
      {"etcd://h:2379/a//b", "holds an empty part"},
      {"etcd://h:2379/a b", "a space or a control character"},
  };
  for (const auto& [text, says] : cases) {
    const std::string message = testing::error_of<InvalidArgument>(
        [&, &text = text] { parse_rendezvous_address(text, "--rendezvous"); });
    EXPECT_TRUE(testing::contains(message, "--rendezvous='" + text + "'")) << message;
    EXPECT_TRUE(testing::contains(message, says)) << message;
    EXPECT_TRUE(testing::contains(message, "etcd://host:port[,host:port...]/prefix")) << message;
  }
}

}  // namespace
}  // namespace dist
