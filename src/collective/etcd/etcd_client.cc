#include "collective/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <cctype>
#include <mutex>
#include <thread>

#include "collective/etcd/etcd_rpc.grpc.pb.h"
#include "dist/core/env.h"
#include "dist/core/error.h"

namespace dist::collective::etcd {

namespace rpc = ::etcdserverpb;
using Clock = std::chrono::steady_clock;

std::string prefix_end(const std::string& prefix) {
  // The prefix with its last byte that is not 0xff increased, the bytes after it dropped;
  // "\0" (every key) when every byte is 0xff.
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

std::string read_etcd_file(const std::string& path, const std::string& what,
                           const std::string& expected) {
  Env& env = *Env::Default();
  const FileInfo info = env.file_info(path);
  DIST_CHECK_ARG(info.kind == FileKind::kRegular, what, " '", path, "' is ",
                 info.kind == FileKind::kMissing ? "missing" : file_kind_phrase(info.kind),
                 "; name ", expected);
  DIST_CHECK_ARG(info.size > 0 && info.size <= (1u << 20), what, " '", path, "' is ", info.size,
                 " bytes; ", expected, " of 1 byte to 1 MiB was expected");
  std::string bytes(info.size, '\0');
  env.new_random_access_file(path)->read(0, bytes.size(), bytes.data());
  return bytes;
}

namespace {

std::string read_pem(const std::string& path, const char* what) {
  return read_etcd_file(path, std::string("the etcd ") + what, "a PEM file");
}

std::shared_ptr<grpc::ChannelCredentials> credentials_of(const EtcdSecurity& security) {
  if (security.ca_file.empty()) {
    DIST_CHECK_ARG(security.cert_file.empty() && security.key_file.empty(),
                   "an etcd client certificate needs TLS: name the CA file too");
    return grpc::InsecureChannelCredentials();
  }
  DIST_CHECK_ARG(security.cert_file.empty() == security.key_file.empty(),
                 "an etcd client certificate needs both its certificate and its key file");
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = read_pem(security.ca_file, "CA file");
  if (!security.cert_file.empty()) {
    ssl.pem_cert_chain = read_pem(security.cert_file, "client certificate");
    ssl.pem_private_key = read_pem(security.key_file, "client key");
  }
  return grpc::SslCredentials(ssl);
}

// Answers worth asking another member for: it is down, slow, or has no leader.
bool member_unavailable(const grpc::Status& status) {
  // A member whose own wait ran out (a linearizable read while the cluster elects a new leader)
  // answers with Go's "context deadline exceeded" and no status code of its kind: the next
  // member, or this one again, may answer (EtcdClientTest's loss of a member failed on it).
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         (status.error_code() == grpc::StatusCode::UNKNOWN &&
          status.error_message().find("context deadline exceeded") != std::string::npos);
}

// Whether gRPC's account of a failed connection is its TLS handshake's (OpenSSL's and gRPC's
// words for a certificate refused either way, or a TLS alert).
bool tls_failure(const std::string& message) {
  std::string lower = message;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* word : {"ssl", "tls", "handshake", "certificate"})
    if (lower.find(word) != std::string::npos) return true;
  return false;
}

// A connection the member took and then closed before any answer: what a member does whose TLS
// refuses the client's certificate (OpenSSL's alert is logged, but gRPC's status says only
// "Endpoint read failed"), or that takes TLS only from a client speaking plain gRPC.
bool tls_suspected(const std::string& message) {
  if (tls_failure(message)) return true;
  for (const char* closed : {"Endpoint read failed", "Socket closed", "Connection reset"})
    if (message.find(closed) != std::string::npos) return true;
  return false;
}

// What to do about a TLS connection the member or this client refused.
std::string tls_advice(const EtcdSecurity& security) {
  if (security.ca_file.empty())
    return "this client speaks plain gRPC: if the members take TLS only (https client URLs), give "
           "it the CA that signed their certificates (DIST_ETCD_CA_FILE) and, when they ask for "
           "one (--client-cert-auth), a client certificate and key it signed "
           "(DIST_ETCD_CERT_FILE, DIST_ETCD_KEY_FILE)";
  return "for TLS, check that the CA file '" + security.ca_file +
         "' signed the members' certificates (which must name the host or IP the client dials), "
         "and that " +
         (security.cert_file.empty()
              ? std::string("members started with --client-cert-auth are given a client "
                            "certificate and key it signed (DIST_ETCD_CERT_FILE, "
                            "DIST_ETCD_KEY_FILE)")
              : "the client certificate '" + security.cert_file + "' was signed by a CA in the " +
                    "members' --trusted-ca-file");
}

}  // namespace

struct EtcdClient::Impl {
  EtcdOptions options;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string members_text;
  std::mutex mu;
  std::vector<std::shared_ptr<grpc::Channel>> channels;  // one per member, made on first use
  size_t current = 0;                                    // the member that answered last
  std::string token;                                     // etcd's auth token, once authenticated
  // After a call that no member answered (no quorum), the calls until then fail at once with
  // its error: a worker's diagnosis makes a dozen calls in a row, which would otherwise each
  // wait out the timeout before the job can stop.
  Clock::time_point unreachable_until{};
  std::string unreachable_error;

  std::shared_ptr<grpc::Channel> channel(size_t member) {
    std::lock_guard<std::mutex> lock(mu);
    if (!channels[member]) {
      grpc::ChannelArguments arguments;
      // A member that comes back is found again within a second (the default backoff grows
      // to two minutes).
      arguments.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
      arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
      // A connection that is not made within a second (a member whose host is cut off) is
      // tried again then, not after gRPC's default of 20 s.
      arguments.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
      channels[member] =
          grpc::CreateCustomChannel(options.members[member].to_string(), credentials, arguments);
    }
    return channels[member];
  }

  // Runs `attempt(context, channel)` on one member after another until one answers, within
  // the call's timeout; throws CollectiveError naming `what` and the members otherwise. A
  // member whose TLS refused the connection is left as one that does not answer, but once
  // every member has, the call fails then with why rather than at its timeout.
  template <class Attempt>
  void call(const std::string& what, Attempt&& attempt, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    size_t member = first_member(what);
    std::string last;
    size_t tls_refusals = 0;  // in a row
    std::string closed;       // the last attempt whose connection was closed, as TLS refusals are
    for (size_t tried = 0;; ++tried, member = (member + 1) % options.members.size()) {
      const auto now = Clock::now();
      if (now >= deadline) break;
      if (tried > 0 && tried % options.members.size() == 0)  // every member refused: a pause
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::min<Clock::duration>(options.member_timeout, deadline - now));
      // The call waits (up to the member's timeout) for its channel to connect, and so drives
      // the connection: a fail-fast call to a channel still connecting fails at once, and the
      // connection then progresses only with gRPC's backup poller (every 5 s), which made every
      // new connection take 20 s.
      context.set_wait_for_ready(true);
      grpc::Status status = add_token(context, member);
      if (status.ok()) status = attempt(context, channel(member));
      if (status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        current = member;
        return;
      }
      last = options.members[member].to_string() + ": " + explain(status, member, deadline);
      tls_refusals = member_unavailable(status) && tls_failure(last) ? tls_refusals + 1 : 0;
      if (member_unavailable(status) && tls_suspected(last)) closed = last;
      if (tls_refusals == options.members.size())
        throw CollectiveError("etcd " + what + ": the TLS connection to every member of " +
                              members_text + " failed (last: " + last + "); " +
                              tls_advice(options.security));
      if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED &&
          !options.security.user.empty())
        forget_token();  // expired: the next attempt authenticates again
      else if (!member_unavailable(status))
        throw CollectiveError("etcd " + what + " failed at " + last + refusal_advice(status));
    }
    throw CollectiveError("etcd " + what + ": " + unreachable(timeout, last, closed));
  }

  // The member to ask first; throws the last call's error within its window (see call()).
  size_t first_member(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (Clock::now() < unreachable_until)
      throw CollectiveError("etcd " + what + ": " + unreachable_error);
    return current;
  }

  // No member answered within `timeout`: the error, kept for the calls of the next `timeout`.
  // `closed`: an attempt whose connection the member closed (see tls_suspected), if any.
  std::string unreachable(std::chrono::milliseconds timeout, const std::string& last,
                          const std::string& closed) {
    const size_t members = options.members.size();
    std::string error = "no member of the etcd cluster at " + members_text + " answered within " +
                        std::to_string(timeout.count()) + " ms (last: " + last +
                        "); a job on etcd needs a quorum of its members (" +
                        std::to_string(members / 2 + 1) + " of " + std::to_string(members) +
                        ") running and reachable";
    if (!closed.empty())
      error += "; members closed connections they had taken (" + closed +
               "), as TLS does with a client it refuses: " + tls_advice(options.security);
    std::lock_guard<std::mutex> lock(mu);
    unreachable_until = Clock::now() + timeout;
    unreachable_error = error;
    return error;
  }

  // The status's message; for a member not answering, gRPC's account of the member's last
  // connection attempt when there is one: a call waiting for a connection ends only in
  // "Deadline Exceeded", while a fail-fast call to a channel that failed to connect says why
  // (refused, a TLS handshake that failed). That probe waits at most 200 ms for a channel still
  // connecting, and never past the call's `deadline`.
  std::string explain(const grpc::Status& status, size_t member, Clock::time_point deadline) {
    const grpc_connectivity_state state = channel(member)->GetState(false);
    const auto wait =
        std::min<Clock::duration>(std::chrono::milliseconds(200), deadline - Clock::now());
    if (!member_unavailable(status) || wait <= Clock::duration::zero() ||
        (state != GRPC_CHANNEL_TRANSIENT_FAILURE && state != GRPC_CHANNEL_CONNECTING))
      return status.error_message();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + wait);
    rpc::RangeRequest request;
    request.set_key("\0", 1);  // a read of nothing, should the channel connect meanwhile
    rpc::RangeResponse response;
    const grpc::Status probe =
        rpc::KV::NewStub(channel(member))->Range(&context, request, &response);
    if (probe.error_code() != grpc::StatusCode::UNAVAILABLE) return status.error_message();
    return status.error_message() + " (" + probe.error_message() + ")";
  }

  // What to do about a refusal that asking another member would not change.
  std::string refusal_advice(const grpc::Status& status) const {
    const std::string& user = options.security.user;
    if (status.error_code() == grpc::StatusCode::PERMISSION_DENIED)
      return user.empty()
                 ? "; the cluster has authentication enabled and this client gives no etcd user "
                   "(a client certificate's common name is taken as one): give it a user and "
                   "password (DIST_ETCD_USER, DIST_ETCD_PASSWORD_FILE)"
                 : "; the etcd user '" + user +
                       "' may not do this: grant one of its roles readwrite on the job's prefix "
                       "(etcdctl role grant-permission --prefix=true <role> readwrite <prefix>)";
    if (status.error_message().find("user name is empty") != std::string::npos)
      return "; the cluster has authentication enabled: give the client an etcd user and "
             "password (DIST_ETCD_USER, DIST_ETCD_PASSWORD_FILE)";
    return "";
  }

  // Puts the token in the call's metadata, authenticating first when there is none; a status
  // not OK when the member did not answer the authentication.
  grpc::Status add_token(grpc::ClientContext& context, size_t member) {
    if (options.security.user.empty()) return grpc::Status::OK;
    std::string token_now;
    {
      std::lock_guard<std::mutex> lock(mu);
      token_now = token;
    }
    if (token_now.empty()) {
      grpc::Status status = authenticate(member, token_now);
      if (!status.ok()) return status;
    }
    context.AddMetadata("token", token_now);
    return grpc::Status::OK;
  }

  // etcd's Authenticate at `member` (one attempt: call() retries elsewhere when the member does
  // not answer); throws CollectiveError when etcd refuses the user.
  grpc::Status authenticate(size_t member, std::string& token_out) {
    rpc::AuthenticateRequest request;
    request.set_name(options.security.user);
    request.set_password(options.security.password);
    rpc::AuthenticateResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + options.member_timeout);
    context.set_wait_for_ready(true);
    const grpc::Status status =
        rpc::Auth::NewStub(channel(member))->Authenticate(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT)
      throw CollectiveError("etcd refused the user '" + options.security.user + "' at " +
                            options.members[member].to_string() + ": " + status.error_message() +
                            "; check the etcd user and its password (DIST_ETCD_USER, "
                            "DIST_ETCD_PASSWORD_FILE): etcdctl user get " +
                            options.security.user + " shows whether it exists");
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)
      throw CollectiveError("etcd could not authenticate the user '" + options.security.user +
                            "' at " + options.members[member].to_string() + ": " +
                            status.error_message() +
                            "; give the client no user when the cluster has authentication "
                            "disabled, or enable it (etcdctl auth enable)");
    if (!status.ok()) return status;
    std::lock_guard<std::mutex> lock(mu);
    token = response.token();
    token_out = token;
    return grpc::Status::OK;
  }

  // One unary call of `method` of `Service` (rpc::KV, rpc::Lease) on whichever member answers.
  template <class Service, class Request, class Response>
  void unary(const std::string& what,
             grpc::Status (Service::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
             const Request& request, Response& response) {
    call(
        what,
        [&](grpc::ClientContext& context, const std::shared_ptr<grpc::Channel>& channel) {
          return (Service::NewStub(channel).get()->*method)(&context, request, &response);
        },
        options.call_timeout);
  }

  size_t current_member() {
    std::lock_guard<std::mutex> lock(mu);
    return current;
  }

  void forget_token() {
    std::lock_guard<std::mutex> lock(mu);
    token.clear();
  }
};

EtcdClient::EtcdClient(EtcdOptions options) : impl_(std::make_unique<Impl>()) {
  DIST_CHECK_ARG(!options.members.empty(), "an etcd rendezvous needs at least one etcd member");
  for (const HostPort& member : options.members) {
    DIST_CHECK_ARG(!member.host.empty() && member.port > 0 && member.port < 65536,
                   "the etcd member '", member.to_string(),
                   "' is not a host:port with a port from 1 to 65535");
    if (!impl_->members_text.empty()) impl_->members_text += ",";
    impl_->members_text += member.to_string();
  }
  impl_->credentials = credentials_of(options.security);
  impl_->channels.resize(options.members.size());
  impl_->options = std::move(options);
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::members_text() const { return impl_->members_text; }

namespace {

EtcdValue value_of(const rpc::KeyValue& kv) {
  return {kv.key(), kv.value(), kv.mod_revision(), kv.lease()};
}

}  // namespace

std::optional<EtcdValue> EtcdClient::get(const std::string& key) {
  rpc::RangeRequest request;
  request.set_key(key);
  rpc::RangeResponse response;
  impl_->unary<rpc::KV>("read of '" + key + "'", &rpc::KV::Stub::Range, request, response);
  if (response.kvs_size() == 0) return std::nullopt;
  return value_of(response.kvs(0));
}

std::vector<EtcdValue> EtcdClient::get_prefix(const std::string& prefix) {
  rpc::RangeRequest request;
  request.set_key(prefix);
  request.set_range_end(prefix_end(prefix));
  rpc::RangeResponse response;
  impl_->unary<rpc::KV>("read of the prefix '" + prefix + "'", &rpc::KV::Stub::Range, request,
                        response);
  std::vector<EtcdValue> values;
  for (const auto& kv : response.kvs()) values.push_back(value_of(kv));
  return values;
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  rpc::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  rpc::PutResponse response;
  impl_->unary<rpc::KV>("write of '" + key + "'", &rpc::KV::Stub::Put, request, response);
  return response.header().revision();
}

EtcdClient::Swap EtcdClient::compare_and_set(const std::string& key,
                                             const std::optional<std::string>& expected,
                                             const std::string& desired, int64_t lease) {
  rpc::TxnRequest request;
  rpc::Compare* compare = request.add_compare();
  compare->set_key(key);
  compare->set_result(rpc::Compare::EQUAL);
  if (expected) {
    compare->set_target(rpc::Compare::VALUE);
    compare->set_value(*expected);
  } else {  // absent: its version is 0
    compare->set_target(rpc::Compare::VERSION);
    compare->set_version(0);
  }
  rpc::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(desired);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(key);
  rpc::TxnResponse response;
  impl_->unary<rpc::KV>("compare-and-set of '" + key + "'", &rpc::KV::Stub::Txn, request, response);
  if (response.succeeded()) return {true, desired};
  const auto& range = response.responses(0).response_range();
  if (range.kvs_size() == 0) return {false, std::nullopt};
  return {false, range.kvs(0).value()};
}

int64_t EtcdClient::add(const std::string& key, int64_t delta, int64_t lease) {
  // Read, then write the sum only if nobody wrote in between (the value is unchanged).
  std::optional<std::string> seen;
  if (auto now = get(key)) seen = now->value;
  for (;;) {
    int64_t base = 0;
    if (seen) {
      size_t used = 0;
      try {
        base = std::stoll(*seen, &used);
      } catch (const std::logic_error&) {
        used = 0;
      }
      if (used == 0 || used != seen->size())
        throw CollectiveError("etcd: the key '" + key + "' holds '" + *seen +
                              "', not a counter; another program wrote under the job's prefix");
    }
    const Swap swap = compare_and_set(key, seen, std::to_string(base + delta), lease);
    if (swap.swapped) return base + delta;
    seen = swap.value;
  }
}

bool EtcdClient::erase(const std::string& key) {
  rpc::DeleteRangeRequest request;
  request.set_key(key);
  rpc::DeleteRangeResponse response;
  impl_->unary<rpc::KV>("erase of '" + key + "'", &rpc::KV::Stub::DeleteRange, request, response);
  return response.deleted() > 0;
}

int64_t EtcdClient::erase_prefix(const std::string& prefix) {
  rpc::DeleteRangeRequest request;
  request.set_key(prefix);
  request.set_range_end(prefix_end(prefix));
  rpc::DeleteRangeResponse response;
  impl_->unary<rpc::KV>("erase of the prefix '" + prefix + "'", &rpc::KV::Stub::DeleteRange,
                        request, response);
  return response.deleted();
}

namespace {

// One watch of `key` from `revision` on `channel` for at most `slice`: the value of the first
// write it sees, or std::nullopt (the slice ended, the member went away, or the watch was
// cancelled: the caller reads again). "hasleader" makes a member that loses its leader cancel
// the watch instead of keeping it open without events.
std::optional<EtcdValue> watch_once(const std::shared_ptr<grpc::Channel>& channel,
                                    const std::string& token, const std::string& key,
                                    int64_t revision, Clock::duration slice) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + slice);
  context.set_wait_for_ready(true);
  context.AddMetadata("hasleader", "true");
  if (!token.empty()) context.AddMetadata("token", token);
  auto stream = rpc::Watch::NewStub(channel)->Watch(&context);
  rpc::WatchRequest request;
  request.mutable_create_request()->set_key(key);
  request.mutable_create_request()->set_start_revision(revision);
  std::optional<EtcdValue> seen;
  if (stream->Write(request)) {
    rpc::WatchResponse response;
    while (!seen && stream->Read(&response) && !response.canceled())
      for (const auto& event : response.events())
        if (event.type() == rpc::Event::PUT) seen = value_of(event.kv());
  }
  context.TryCancel();
  stream->Finish();
  return seen;
}

}  // namespace

std::optional<EtcdValue> EtcdClient::wait_for(const std::string& key,
                                              std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    rpc::RangeRequest request;
    request.set_key(key);
    rpc::RangeResponse response;
    impl_->unary<rpc::KV>("read of '" + key + "'", &rpc::KV::Stub::Range, request, response);
    if (response.kvs_size() > 0) return value_of(response.kvs(0));
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) return std::nullopt;
    // Slices of at most a second: a member that goes away mid-watch is left for another.
    std::shared_ptr<grpc::Channel> channel;
    std::string token;
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      token = impl_->token;
    }
    channel = impl_->channel(impl_->current_member());
    if (auto seen = watch_once(channel, token, key, response.header().revision() + 1,
                               std::min<Clock::duration>(left, std::chrono::seconds(1))))
      return seen;
  }
}

int64_t EtcdClient::grant_lease(std::chrono::seconds ttl) {
  rpc::LeaseGrantRequest request;
  request.set_ttl(ttl.count());
  rpc::LeaseGrantResponse response;
  impl_->unary<rpc::Lease>("lease grant", &rpc::Lease::Stub::LeaseGrant, request, response);
  if (!response.error().empty())
    throw CollectiveError("etcd refused a lease of " + std::to_string(ttl.count()) +
                          " s: " + response.error());
  return response.id();
}

bool EtcdClient::keep_alive(int64_t lease) {
  rpc::LeaseKeepAliveRequest request;
  request.set_id(lease);
  rpc::LeaseKeepAliveResponse response;
  impl_->call(
      "lease keep-alive",
      [&](grpc::ClientContext& context, const std::shared_ptr<grpc::Channel>& channel) {
        auto stream = rpc::Lease::NewStub(channel)->LeaseKeepAlive(&context);
        const bool answered =
            stream->Write(request) && stream->WritesDone() && stream->Read(&response);
        const grpc::Status status = stream->Finish();
        if (status.ok() && !answered)
          return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the keep-alive was not answered");
        return status;
      },
      impl_->options.call_timeout);
  return response.ttl() > 0;
}

void EtcdClient::revoke_lease(int64_t lease) {
  rpc::LeaseRevokeRequest request;
  request.set_id(lease);
  rpc::LeaseRevokeResponse response;
  impl_->call(
      "lease revoke",
      [&](grpc::ClientContext& context, const std::shared_ptr<grpc::Channel>& channel) {
        grpc::Status status =
            rpc::Lease::NewStub(channel)->LeaseRevoke(&context, request, &response);
        // Expired already: what revoking wanted.
        if (status.error_code() == grpc::StatusCode::NOT_FOUND) return grpc::Status::OK;
        return status;
      },
      impl_->options.call_timeout);
}

}  // namespace dist::collective::etcd
