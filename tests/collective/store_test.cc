// The rendezvous store (src/collective/store/): the operations c10d's rendezvous needs, waits
// and their timeouts, the one address it binds, and hostile clients (a message declaring 2 GiB,
// garbage instead of the hello) that are turned away while the others are served. Strangers
// without the job token, by the thousand: store_strangers_test.cc.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "collective/store/store_client.h"
#include "collective/store/store_protocol.h"
#include "collective/store/store_server.h"
#include "collective/store_test_clients.h"
#include "collective_test_util.h"
#include "dist/core/error.h"

namespace dist::collective {
namespace {

using std::chrono::milliseconds;

using namespace store_testing;

// The protocol's hello on a raw connection, and the server's answer to it.
bool say_hello(int fd) {
  store::Writer hello;
  hello.u8(static_cast<uint8_t>(store::Op::kHello))
      .str(store::kMagic)
      .u32(store::kVersion)
      .str("")   // no job token
      .str("");  // no job identity
  const auto frame = hello.frame();
  if (send(fd, frame.data(), frame.size(), 0) != static_cast<ssize_t>(frame.size())) return false;
  uint8_t ok[5];
  return recv(fd, ok, sizeof(ok), MSG_WAITALL) == 5 && ok[4] == 0;
}

int64_t resident_kib() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// The operations from clients are StoreConformanceTest's (store_conformance_test.cc, every
// backend). What only the built-in store has: the process that hosts it reads and writes the
// clients' keys, and clients that speak the protocol are never counted as refused.
TEST(StoreTest, TheHostingProcessSharesTheClientsKeysAndRefusesNoneOfThem) {
  StoreServer server({"127.0.0.1", 0});
  auto a = client_of(server);
  auto b = client_of(server);
  a->set("x", bytes("hello"));
  EXPECT_EQ(b->add("n", 5), 5);
  EXPECT_TRUE(server.check("x"));
  EXPECT_FALSE(server.check("y"));
  EXPECT_EQ(server.add("n", 1), 6);
  EXPECT_EQ(a->add("n", 0), 6);
  EXPECT_EQ(server.refused_connections() + server.refused_requests(), 0);
}

TEST(StoreTest, WaitReturnsOnceAnotherClientSetsTheKeysAndTimesOutNamingThem) {
  StoreServer server({"127.0.0.1", 0});
  auto waiter = client_of(server);
  auto setter = client_of(server);
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    setter->set("a", bytes("1"));
    setter->set("b", bytes("2"));
  });
  const auto start = std::chrono::steady_clock::now();
  waiter->wait({"a", "b"}, milliseconds(10000));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  later.join();
  // get waits for a key too; a key set directly by the hosting process counts.
  std::thread direct([&] {
    std::this_thread::sleep_for(milliseconds(100));
    server.set("c", "3");
  });
  EXPECT_EQ(waiter->get("c"), bytes("3"));
  direct.join();
  try {
    waiter->wait({"never"}, milliseconds(300));
    FAIL() << "wait returned for a key nobody set";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for 'never'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(server.address().to_string()), std::string::npos);
  }
}

TEST(StoreTest, BindsOnlyTheAddressItIsGiven) {
  StoreServer server({"127.0.0.1", 0});
  const int port = server.address().port;
  const auto listening = testing::listening_addresses_of_this_process();
  EXPECT_NE(std::find(listening.begin(), listening.end(), "127.0.0.1:" + std::to_string(port)),
            listening.end());
  for (const auto& address : listening) {
    EXPECT_NE(address.rfind("0.0.0.0:", 0), 0u) << address;
    EXPECT_NE(address.rfind("[::]:", 0), 0u) << address;
  }
  // 127.0.0.2 is this machine too: a wildcard listener would accept it.
  const int other = raw_connect("127.0.0.2", port);
  EXPECT_EQ(other, -1);
  if (other >= 0) close(other);
}

TEST(StoreTest, AMessageDeclaringTwoGibibytesIsRefusedWithoutAllocatingIt) {
  StoreServer server({"127.0.0.1", 0});
  auto honest = client_of(server);
  honest->set("k", bytes("v"));
  const int64_t before = resident_kib();
  // The 9 bytes: after a proper hello, a frame that declares 2 GiB and sends 5.
  const int fd = raw_connect("127.0.0.1", server.address().port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(say_hello(fd));
  const uint8_t huge[9] = {0x00, 0x00, 0x00, 0x80, 2, 0, 0, 0, 0};
  ASSERT_EQ(send(fd, huge, sizeof(huge), 0), 9);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_requests(), 1);
  EXPECT_LT(resident_kib() - before, 64 * 1024) << "the store grew by more than 64 MiB";
  EXPECT_EQ(honest->get("k"), bytes("v"));  // still serving
}

TEST(StoreTest, AClientThatDoesNotSpeakTheProtocolIsClosedAndTheOthersAreServed) {
  StoreServer server({"127.0.0.1", 0});
  auto honest = client_of(server);
  const int fd = raw_connect("127.0.0.1", server.address().port);
  ASSERT_GE(fd, 0);
  const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_GT(send(fd, garbage, sizeof(garbage) - 1, 0), 0);
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_connections(), 1);
  honest->set("still", bytes("here"));
  EXPECT_EQ(honest->get("still"), bytes("here"));
}

TEST(StoreTest, AMalformedRequestClosesOnlyThatConnection) {
  StoreServer server({"127.0.0.1", 0});
  const int fd = raw_connect("127.0.0.1", server.address().port);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(say_hello(fd));
  // A set whose key claims 1000 bytes in a 10-byte frame.
  store::Writer lying;
  lying.u8(static_cast<uint8_t>(store::Op::kSet)).u32(1000).u32(0).u8(0);
  const auto frame = lying.frame();
  ASSERT_EQ(send(fd, frame.data(), frame.size(), 0), static_cast<ssize_t>(frame.size()));
  EXPECT_TRUE(closed_by_server(fd));
  close(fd);
  EXPECT_EQ(server.refused_requests(), 1);
  auto honest = client_of(server);
  EXPECT_EQ(honest->add("n", 1), 1);
}

TEST(StoreTest, AServerThatGoesAwayIsAnErrorNamingItNotAnAbort) {
  auto server = std::make_unique<StoreServer>(HostPort{"127.0.0.1", 0});
  const std::string address = server->address().to_string();
  auto client = client_of(*server);
  client->set("k", bytes("v"));
  server.reset();
  try {
    client->set("k", bytes("w"));
    FAIL() << "set succeeded with no server";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("lost the rendezvous store at " + address),
              std::string::npos)
        << e.what();
  }
}

TEST(StoreTest, AnAddressInUseIsNamed) {
  StoreServer first({"127.0.0.1", 0});
  try {
    StoreServer second({"127.0.0.1", first.address().port});
    FAIL() << "two servers bound one port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on " + first.address().to_string()),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dist::collective
