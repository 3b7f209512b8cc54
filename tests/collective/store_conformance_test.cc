// The rendezvous store's contract, on every backend: the built-in store (StoreServer and its
// clients) and etcd (EtcdStore over a real three-member cluster on loopback). Two clients of one
// store see each other's writes; c10d's compareSet, add, deleteKey, check and getNumKeys; a wait
// returns once another client sets the keys, and times out naming them.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <thread>

#include "collective/etcd/etcd_store.h"
#include "collective/etcd_cluster.h"
#include "collective/store/store_client.h"
#include "collective/store/store_server.h"
#include "collective/store_test_clients.h"
#include "dist/core/error.h"
#include "expect_error.h"

namespace dist::collective {
namespace {

using namespace std::chrono_literals;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

using store_testing::bytes;

// One running store and a way to make its clients.
struct StoreBackend {
  virtual ~StoreBackend() = default;
  virtual bool available() const { return true; }
  virtual std::string why() const { return ""; }
  virtual StorePtr client(std::chrono::milliseconds timeout) = 0;
  // What a timeout's message names as where it waited.
  virtual std::string address() const = 0;
};

struct BuiltInBackend : StoreBackend {
  StoreServer server{HostPort{"127.0.0.1", 0}};
  StorePtr client(std::chrono::milliseconds timeout) override {
    return c10::make_intrusive<StoreClient>(server.address(), timeout, "");
  }
  std::string address() const override { return server.address().to_string(); }
};

struct EtcdBackend : StoreBackend {
  dist::testing::EtcdCluster cluster{3};
  bool available() const override { return cluster.available(); }
  std::string why() const override { return cluster.why(); }
  StorePtr client(std::chrono::milliseconds timeout) override {
    etcd::EtcdOptions options;
    options.members = cluster.clients();
    return c10::make_intrusive<etcd::EtcdStore>(std::make_shared<etcd::EtcdClient>(options),
                                                "/dist/conformance/", timeout);
  }
  std::string address() const override { return cluster.clients()[0].to_string(); }
};

struct StoreBackendChoice {
  std::string name;
  std::function<std::unique_ptr<StoreBackend>()> make;
};

const std::vector<StoreBackendChoice>& store_backends() {
  static const std::vector<StoreBackendChoice> all{
      {"BuiltIn", [] { return std::make_unique<BuiltInBackend>(); }},
      {"Etcd", [] { return std::make_unique<EtcdBackend>(); }}};
  return all;
}

class StoreConformanceTest : public ::testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    backend_ = store_backends()[GetParam()].make();
    if (!backend_->available()) GTEST_SKIP() << backend_->why();
  }
  StoreBackend& backend() { return *backend_; }

 private:
  std::unique_ptr<StoreBackend> backend_;
};

TEST_P(StoreConformanceTest, ServesTheOperationsOfARendezvous) {
  auto a = backend().client(5000ms);
  auto b = backend().client(5000ms);
  a->set("x", bytes("hello"));
  EXPECT_EQ(b->get("x"), bytes("hello"));
  EXPECT_TRUE(b->check({"x"}));
  EXPECT_FALSE(b->check({"x", "y"}));
  EXPECT_EQ(a->add("n", 2), 2);
  EXPECT_EQ(b->add("n", 3), 5);
  EXPECT_EQ(b->add("n", 0), 5);
  EXPECT_EQ(b->getNumKeys(), 2);
  // c10d's compareSet: a missing key with an empty expectation is created; a missing key with
  // another expectation stays missing and the expectation comes back.
  EXPECT_EQ(a->compareSet("c", {}, bytes("1")), bytes("1"));
  EXPECT_EQ(a->compareSet("c", bytes("0"), bytes("2")), bytes("1"));  // no match: unchanged
  EXPECT_EQ(a->compareSet("c", bytes("1"), bytes("2")), bytes("2"));
  EXPECT_EQ(b->get("c"), bytes("2"));
  EXPECT_EQ(a->compareSet("d", bytes("0"), bytes("2")), bytes("0"));
  EXPECT_FALSE(b->check({"d"}));
  EXPECT_TRUE(a->deleteKey("c"));
  EXPECT_FALSE(a->deleteKey("c"));
  EXPECT_EQ(b->getNumKeys(), 2);
}

TEST_P(StoreConformanceTest, AWaitReturnsOnceAnotherClientSetsTheKeysAndTimesOutNamingThem) {
  auto waiter = backend().client(10000ms);
  auto setter = backend().client(10000ms);
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    setter->set("a", bytes("1"));
    setter->set("b", bytes("2"));
  });
  waiter->wait({"a", "b"}, 10000ms);
  later.join();
  EXPECT_TRUE(waiter->check({"a", "b"}));
  std::thread get_later([&] {
    std::this_thread::sleep_for(100ms);
    setter->set("c", bytes("3"));
  });
  EXPECT_EQ(waiter->get("c"), bytes("3"));  // get waits for the key
  get_later.join();
  const std::string message =
      dist::testing::error_of<CollectiveError>([&] { waiter->wait({"never"}, 300ms); });
  EXPECT_TRUE(dist::testing::contains(message, "waiting for 'never'")) << message;
  EXPECT_TRUE(dist::testing::contains(message, backend().address())) << message;
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreConformanceTest,
                         ::testing::Range(size_t{0}, store_backends().size()),
                         [](const auto& info) { return store_backends()[info.param].name; });

}  // namespace
}  // namespace dist::collective
