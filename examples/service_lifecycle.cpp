// SPDX-License-Identifier: Apache-2.0
// examples/service_lifecycle.cpp: a small service that loads its configuration once, coalesces
// identical lookups, and shuts down gracefully on a signal.
//
//   - once_cell: every request handler needs the configuration; the first one to ask loads it
//     (a slow, asynchronous load), the others wait for that load instead of starting their own.
//   - singleflight::group: handlers that look up the same key at the same time share one call to
//     the backend, and all get its answer; nothing is cached, so a later lookup asks again.
//   - shutdown pair: SIGTERM (here sent by the program to itself once its clients are done) makes
//     a signal thread call shutdown(). The dispatcher's channel receive takes the receiver's
//     asyncband::stop_token, so shutdown cancels it with no glue: it drains what is queued and returns.
//     Every handler holds a copy of the receiver, so wait_done() returns once the dispatcher and
//     every handler in flight are gone.
//
// The backend is a plain thread answering requests from an mpsc channel through oneshot
// channels (a remote service, seen from the coroutines).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <pthread.h>
#include <unistd.h>
#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/shutdown.hpp>

namespace {

namespace ab = asyncband;
namespace rt = asyncband::runtime;
using namespace std::chrono_literals;

struct config {
  std::string region;
  int answer_scale = 0;
};

/// A request to the backend: a key, and where to send the answer.
struct backend_call {
  std::string key;
  ab::oneshot::sender<std::string> reply;
};

struct counters {
  std::atomic<int> config_loads{0};
  std::atomic<int> backend_calls{0};
  std::atomic<int> handled{0};
};

/// The backend: answers each call after a short delay, until every sender is gone.
void run_backend(ab::mpsc::unbounded_receiver<backend_call> calls, counters& c) {
  for (auto call = calls.recv_blocking(); call; call = calls.recv_blocking()) {
    ++c.backend_calls;
    std::this_thread::sleep_for(2ms);  // the remote side's latency
    (void)call->reply.send("value of " + call->key);
  }
}

/// Everything the handlers share.
struct service {
  ab::once_cell<config> settings;
  ab::singleflight::group<std::string, std::string> lookups;
  ab::mpsc::unbounded_sender<backend_call> backend;
  counters& stats;

  /// Asks the backend and waits for its answer (a remote call, from a coroutine).
  rt::task<std::string> ask_backend(std::string key) {
    auto [reply, answer] = ab::oneshot::channel<std::string>();
    (void)backend.send(backend_call{std::move(key), std::move(reply)});
    ab::result<std::string> r = co_await answer.recv();
    co_return r.ok() ? std::move(*r) : std::string("backend gone");
  }

  /// The configuration load: asynchronous, slow, run once whoever asks first.
  rt::task<config> load_config() {
    ++stats.config_loads;
    std::string region = co_await ask_backend("config/region");
    co_return config{std::move(region), 10};
  }
};

/// One request: its copy of the shutdown receiver keeps wait_done() waiting until it is done.
/// (The lookup's initialiser is named before the co_await: g++ 12 destroys a lambda temporary
/// with non-trivial captures, here a std::string, twice when it is written inside the co_await
/// expression. A lambda capturing only references, like the first one, is safe either way.)
rt::task<> handle(service& s, std::string key, [[maybe_unused]] ab::shutdown::receiver tracked) {
  const config& cfg = co_await s.settings.get_or_init([&s] { return s.load_config(); });
  auto ask = [&s, key] { return s.ask_backend(key); };
  const std::string value = co_await s.lookups.work(key, std::move(ask));
  if (!cfg.region.empty() && !value.empty()) ++s.stats.handled;
}

/// Receives requests until shutdown cancels the receive, then serves what is still queued.
rt::task<> dispatcher(service& s, ab::mpsc::unbounded_receiver<std::string> requests,
                      ab::shutdown::receiver rx, ab::scheduler_ref pool) {
  for (;;) {
    ab::result<std::string> key = co_await requests.recv(rx.stop_token());
    if (!key) break;  // cancelled by shutdown (or closed)
    rt::spawn(pool, handle(s, std::move(*key), rx));
  }
  while (auto key = requests.try_recv()) rt::spawn(pool, handle(s, std::move(*key), rx));
  std::printf("dispatcher: shutdown seen (%s), queue drained\n", rx.is_shutdown_now() ? "yes" : "no");
}

}  // namespace

int main() {
  // SIGTERM is taken by a signal thread through sigwait, so block it before any thread starts.
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);

  counters stats;
  auto backend_channel = ab::mpsc::unbounded<backend_call>();
  std::thread backend(run_backend, std::move(backend_channel.second), std::ref(stats));

  auto shutdown_pair = ab::shutdown::make_pair();
  ab::shutdown::sender& shutdown_tx = shutdown_pair.first;
  std::thread signal_thread([&term, &shutdown_tx] {
    int received = 0;
    sigwait(&term, &received);
    std::printf("signal %d: shutting down\n", received);
    shutdown_tx.shutdown();
  });

  auto requests = ab::mpsc::unbounded<std::string>();
  bool ok = false;
  {
    service s{{}, {}, std::move(backend_channel.first), stats};
    rt::thread_pool pool(2);  // declared after the service: joined before it goes
    rt::spawn(pool.ref(),
              dispatcher(s, std::move(requests.second), std::move(shutdown_pair.second), pool.ref()));

    // Clients: 5 bursts of the same 4 keys.
    const std::vector<std::string> keys{"users/1", "users/2", "orders/7", "users/1"};
    constexpr int kBursts = 5;
    for (int burst = 0; burst < kBursts; ++burst) {
      for (const std::string& key : keys) (void)requests.first.send(key);
      std::this_thread::sleep_for(5ms);
    }
    kill(getpid(), SIGTERM);  // what an orchestrator would do

    const ab::result<void> done = shutdown_tx.wait_done_timeout(10s);
    std::printf("wait_done: %s\n", ab::to_string(done.status()));
    signal_thread.join();

    const int total = kBursts * static_cast<int>(keys.size());
    std::printf("requests handled: %d of %d\n", stats.handled.load(), total);
    std::printf("configuration loads: %d\n", stats.config_loads.load());
    std::printf("backend lookups: %d for %d requests (identical concurrent lookups shared)\n",
                stats.backend_calls.load() - stats.config_loads.load(), total);
    ok = done.ok() && stats.handled == total && stats.config_loads == 1;
  }  // the pool, then the service: the backend's last sender goes, and the backend returns
  backend.join();
  return ok ? 0 : 1;
}
