// SPDX-License-Identifier: Apache-2.0
// examples/asio_queue_service.cpp: a TCP queue service on Boost.Asio whose handlers wait on
// asyncband primitives through asyncband/asio.hpp, with a per-request timeout that loses nothing.
//
// The server listens on 127.0.0.1 (an ephemeral port). Each connection's handler (an
// asio::awaitable on its own strand) reads one request per line, "<id> <text>", and for each:
//   1. takes a permit of an asyncband::semaphore (admission: at most kInFlight requests in the
//      service at once) and then puts the request into an asyncband bounded MPSC channel (the
//      queue, capacity kQueue), both under ONE deadline, with `||` against a steady_timer:
//        co_await (async_acquire(admission, use_awaitable) || deadline.async_wait(use_awaitable))
//        co_await (async_send(queue, std::move(job), use_awaitable) || deadline.async_wait(...))
//      When the timer wins, the losing operation is cancelled and gives back what it had been
//      granted, even if that grant came at the same instant: a permit returns to the semaphore,
//      and a send that lost did NOT send (its unit of capacity goes to the next sender). The
//      request is then handed back to the client: "BUSY <id>".
//   2. otherwise waits for the worker's answer on the job's oneshot channel and replies
//      "OK <id> <TEXT>".
// One worker coroutine receives the jobs, works on each (a short timer), records it under an
// asyncband::mutex (the service's books, also written by the handlers for every BUSY) and
// answers through the oneshot.
//
// A client in the same process opens kConnections connections and sends kRequestsPerConnection
// requests on each, one at a time. At the end, the program checks (and prints) that:
//   sent == processed + handed back      (no request lost, none counted twice)
//   every id is in exactly one of the two sets; the client got OK for exactly the processed ids
//   and BUSY for exactly the handed-back ones; the permits are all back; the queue is empty.
// Any mismatch exits with 1. How many requests time out depends on the machine; the invariants
// do not. Two threads run the io_context.
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <asyncband/asio.hpp>
#include <asyncband/asyncband.hpp>

namespace {

namespace net = boost::asio;
namespace ab = asyncband;
using net::ip::tcp;
using namespace net::experimental::awaitable_operators;
using namespace std::chrono_literals;

/// A request id as an index into the books' per-request vectors.
std::size_t slot(int id) {
  return static_cast<std::size_t>(id);
}

constexpr int kConnections = 8;
constexpr int kRequestsPerConnection = 150;
constexpr int kTotal = kConnections * kRequestsPerConnection;
constexpr std::size_t kInFlight = 6;  // admission permits
constexpr std::size_t kQueue = 3;     // queue capacity
constexpr auto kDeadline = 400us;     // per request, for admission + enqueueing
constexpr auto kWork = 60us;          // the worker's time per job

/// A request in the queue: the answer goes back through its own oneshot channel.
struct job {
  int id = 0;
  std::string text;
  ab::oneshot::sender<std::string> reply;
};

/// What the service knows, under its asyncband::mutex.
struct books {
  std::vector<char> processed = std::vector<char>(kTotal, 0);
  std::vector<char> handed_back = std::vector<char>(kTotal, 0);
  int processed_count = 0;
  int handed_back_count = 0;
  int refused_at_admission = 0;  // part of handed_back_count
  int duplicates = 0;
};

struct service {
  explicit service(net::io_context& ioc) : acceptor(ioc, tcp::endpoint(net::ip::address_v4::loopback(), 0)) {
    auto [tx, rx] = ab::mpsc::bounded<job>(kQueue);
    queue_tx.emplace(std::move(tx));
    queue_rx.emplace(std::move(rx));
  }

  tcp::acceptor acceptor;
  ab::semaphore admission{kInFlight};
  std::optional<ab::mpsc::sender<job>> queue_tx;  // the handlers' copies keep the queue open
  std::optional<ab::mpsc::receiver<job>> queue_rx;
  ab::mutex<books> book;
  std::atomic<int> received{0};
};

/// The worker: one receive at a time (the channel has one receiver).
net::awaitable<void> worker(service& s) {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer work(ex);
  for (;;) {
    // The value form: the outcome as asyncband reports it (here result<job>), nothing thrown.
    ab::result<job> next =
        co_await ab::asio::async_outcome([&s] { return s.queue_rx->recv(); }, net::use_awaitable);
    if (next.closed()) co_return;  // every handler is gone and the queue is drained
    job& j = *next;
    work.expires_after(kWork);
    co_await work.async_wait(net::use_awaitable);
    std::string answer = j.text;
    for (char& c : answer) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    {
      auto b = co_await ab::asio::async_lock(s.book, net::use_awaitable);
      auto& bk = **b;
      if (bk.processed[slot(j.id)] != 0 || bk.handed_back[slot(j.id)] != 0) ++bk.duplicates;
      bk.processed[slot(j.id)] = 1;
      ++bk.processed_count;
    }
    static_cast<void>(j.reply.send(std::move(answer)));
  }
}

/// Records a request handed back to its client.
net::awaitable<void> hand_back(service& s, int id, bool at_admission) {
  auto b = co_await ab::asio::async_lock(s.book, net::use_awaitable);
  auto& bk = **b;
  if (bk.processed[slot(id)] != 0 || bk.handed_back[slot(id)] != 0) ++bk.duplicates;
  bk.handed_back[slot(id)] = 1;
  ++bk.handed_back_count;
  if (at_admission) ++bk.refused_at_admission;
}

/// One request: admission and enqueueing under one deadline, then the worker's answer.
net::awaitable<std::string> handle(service& s, ab::mpsc::sender<job>& queue, int id, std::string text) {
  auto ex = co_await net::this_coro::executor;
  net::steady_timer deadline(ex, kDeadline);
  // (Operands of co_await kept to named awaitables: g++ 12 mishandles temporaries in them.)
  auto acquire = ab::asio::async_acquire(s.admission, net::use_awaitable);
  auto expiry = deadline.async_wait(net::use_awaitable);
  auto admitted = co_await (std::move(acquire) || std::move(expiry));
  if (admitted.index() == 1) {
    co_await hand_back(s, id, true);
    co_return "BUSY " + std::to_string(id);
  }
  const ab::semaphore_permit permit = std::get<0>(std::move(admitted));  // released when we reply
  auto [reply_tx, reply_rx] = ab::oneshot::channel<std::string>();
  auto send = ab::asio::async_send(queue, job{id, std::move(text), std::move(reply_tx)}, net::use_awaitable);
  auto expiry_again = deadline.async_wait(net::use_awaitable);
  auto queued = co_await (std::move(send) || std::move(expiry_again));
  if (queued.index() == 1) {
    // The send lost to the timer: it did not send, even if a unit of capacity was granted to it
    // at the last moment (that unit went back to the queue's next sender).
    co_await hand_back(s, id, false);
    co_return "BUSY " + std::to_string(id);
  }
  std::string answer = co_await ab::asio::async_recv(reply_rx, net::use_awaitable);
  co_return "OK " + std::to_string(id) + " " + answer;
}

net::awaitable<void> connection(service& s, tcp::socket socket, ab::mpsc::sender<job> queue) {
  std::string buffer;
  for (;;) {
    auto [ec, n] = co_await net::async_read_until(socket, net::dynamic_buffer(buffer), '\n',
                                                  net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // the client closed the connection
    std::istringstream line(buffer.substr(0, n - 1));
    buffer.erase(0, n);
    int id = -1;
    std::string text;
    line >> id >> text;
    if (id < 0 || id >= kTotal) co_return;
    ++s.received;
    std::string reply = co_await handle(s, queue, id, std::move(text));
    reply += '\n';
    co_await net::async_write(socket, net::buffer(reply), net::use_awaitable);
  }
}

net::awaitable<void> acceptor_loop(service& s) {
  for (int accepted = 0; accepted < kConnections; ++accepted) {
    tcp::socket socket = co_await s.acceptor.async_accept(net::use_awaitable);
    net::co_spawn(net::make_strand(s.acceptor.get_executor()), connection(s, std::move(socket), *s.queue_tx),
                  net::detached);
  }
  s.queue_tx.reset();  // the connections hold the only senders now: the last to go closes the queue
}

/// What the client saw.
struct client_log {
  std::vector<char> ok = std::vector<char>(kTotal, 0);
  std::vector<char> busy = std::vector<char>(kTotal, 0);
  std::atomic<int> sent{0};
  std::atomic<int> replies{0};
  std::atomic<int> wrong{0};
};

net::awaitable<void> client(tcp::endpoint server, int connection_index, client_log& log) {
  tcp::socket socket(co_await net::this_coro::executor);
  co_await socket.async_connect(server, net::use_awaitable);
  std::string buffer;
  for (int i = 0; i < kRequestsPerConnection; ++i) {
    const int id = connection_index * kRequestsPerConnection + i;
    const std::string text = "request" + std::to_string(id);
    const std::string line = std::to_string(id) + " " + text + "\n";
    co_await net::async_write(socket, net::buffer(line), net::use_awaitable);
    ++log.sent;
    const std::size_t n =
        co_await net::async_read_until(socket, net::dynamic_buffer(buffer), '\n', net::use_awaitable);
    const std::string reply = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    ++log.replies;
    std::string upper = text;
    for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    if (reply == "OK " + std::to_string(id) + " " + upper) {
      log.ok[slot(id)] = 1;
    } else if (reply == "BUSY " + std::to_string(id)) {
      log.busy[slot(id)] = 1;
    } else {
      ++log.wrong;
      std::printf("unexpected reply to %d: '%s'\n", id, reply.c_str());
    }
  }
  socket.shutdown(tcp::socket::shutdown_both);
}

}  // namespace

int main() {
  try {
    net::io_context ioc;
    service s(ioc);
    client_log log;
    const tcp::endpoint server = s.acceptor.local_endpoint();
    std::printf(
        "queue service on %s:%u: %d connections x %d requests, queue %zu, %zu in flight, deadline %lld us\n",
        server.address().to_string().c_str(), static_cast<unsigned>(server.port()), kConnections,
        kRequestsPerConnection, kQueue, kInFlight,
        static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(kDeadline).count()));

    const auto start = std::chrono::steady_clock::now();
    net::co_spawn(net::make_strand(ioc), acceptor_loop(s), net::detached);
    net::co_spawn(net::make_strand(ioc), worker(s), net::detached);
    for (int c = 0; c < kConnections; ++c) {
      net::co_spawn(net::make_strand(ioc), client(server, c, log), net::detached);
    }
    std::thread second([&] { ioc.run(); });
    ioc.run();  // returns once every connection is closed and the worker saw the queue closed
    second.join();
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);

    // Everything is stopped: the books can be read without the lock.
    const auto guard = s.book.try_lock();
    if (!guard) {
      std::printf("FAIL: the books' mutex is still held\n");
      return 1;
    }
    const books& bk = **guard;
    int ok_matches = 0;
    int busy_matches = 0;
    int unaccounted = 0;
    for (int id = 0; id < kTotal; ++id) {
      const bool processed = bk.processed[slot(id)] != 0;
      const bool handed_back = bk.handed_back[slot(id)] != 0;
      if (processed == handed_back) ++unaccounted;  // in neither set, or in both
      if (processed && log.ok[slot(id)] != 0) ++ok_matches;
      if (handed_back && log.busy[slot(id)] != 0) ++busy_matches;
    }
    const int sent = log.sent.load();
    std::printf(
        "sent %d, received by the service %d, processed %d, handed back %d (%d at admission, %d at the "
        "full queue), in %lld ms\n",
        sent, s.received.load(), bk.processed_count, bk.handed_back_count, bk.refused_at_admission,
        bk.handed_back_count - bk.refused_at_admission, static_cast<long long>(elapsed.count()));
    std::printf("sent == processed + handed back: %d == %d + %d\n", sent, bk.processed_count,
                bk.handed_back_count);

    bool ok = true;
    auto check = [&ok](bool condition, const char* what) {
      if (!condition) {
        std::printf("FAIL: %s\n", what);
        ok = false;
      }
    };
    check(sent == kTotal, "every request was sent");
    check(log.replies.load() == kTotal && log.wrong.load() == 0, "every request got its own reply");
    check(sent == bk.processed_count + bk.handed_back_count, "sent == processed + handed back");
    check(unaccounted == 0 && bk.duplicates == 0, "every id processed or handed back, exactly once");
    check(ok_matches == bk.processed_count, "OK for exactly the processed requests");
    check(busy_matches == bk.handed_back_count, "BUSY for exactly the handed-back requests");
    check(s.admission.available() == kInFlight, "every admission permit is back");
    check(s.queue_rx->try_recv().closed(), "the queue is drained and closed");
    std::printf("%s\n", ok ? "all requests accounted for" : "MISMATCH");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
