// SPDX-License-Identifier: Apache-2.0
// examples/channels.cpp: a small request pipeline built from asyncband's channels.
//
// 3 clients send 12 requests each into a bounded MPSC channel of capacity 4; one server
// coroutine answers every request through the request's own oneshot reply channel; the server
// and the clients write events to an unbounded log channel, which a final step drains with
// try_recv. On the way:
//   - backpressure: `co_await tx.send(req)` waits while 4 requests are queued;
//   - a permit: `co_await tx.reserve()` takes a place in the queue BEFORE an expensive request
//     is built, so the built request never waits, and nothing is built if the server is gone;
//   - before the server is up, try_send on the full queue reports `full` and hands the request
//     back; the client sends that same request later, it is not lost;
//   - a reply wait with a stop token that is then stopped ends `cancelled` and takes nothing:
//     the reply, sent later, is received by the next recv();
//   - the server's recv() ends `closed` once every client has hung up and the queue is empty.
// Checked at the end: every request answered exactly once and correctly, each client's
// requests served in the order sent, every log event received; any mismatch exits with 1.
//
// 4 tasks on a pool of 2 threads: a wait suspends a task, it does not hold a thread.
#include <array>
#include <cstdio>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <asyncband/asyncband.hpp>
#include <asyncband/runtime/task.hpp>
#include <asyncband/runtime/thread_pool.hpp>
#include <asyncband/runtime/when_all.hpp>
#include <asyncband/stop_token.hpp>

namespace {

namespace rt = asyncband::runtime;
namespace mpsc = asyncband::mpsc;
namespace oneshot = asyncband::oneshot;

constexpr int kClients = 3;
constexpr int kRequestsPerClient = 12;
constexpr int kTotal = kClients * kRequestsPerClient;
constexpr std::size_t kQueueCapacity = 4;

struct request {
  int client;
  int seq;
  long payload;
  oneshot::sender<long> reply;  // move-only, so the request is moved through the channel
};

struct event {
  bool from_server;  // "answered" by the server, or "reply received" by the client
  int client;
  int seq;
};

struct client_state {
  int id = 0;
  int next_seq = 0;
  std::vector<oneshot::receiver<long>> replies;  // replies[seq]
  std::optional<request> held;                   // handed back by try_send, not sent yet
  int right = 0;                                 // replies received with the right answer
};

long build_payload(int client, int seq) {  // stands for the expensive part: parsing, hashing...
  return client * 1000L + seq;
}
long answer_to(long payload) {
  return payload * 2 + 1;
}

request make_request(client_state& me, int seq) {
  auto reply = oneshot::channel<long>();
  me.replies.push_back(std::move(reply.second));
  return request{me.id, seq, build_payload(me.id, seq), std::move(reply.first)};
}

bool note(mpsc::unbounded_sender<event>& log, event e) {
  return log.send(e).ok();  // never waits; fails only if the log's receiver were gone
}

/// Even requests are built, then sent (waiting for room with the request in hand); odd ones
/// wait for room first, through a permit, and are built only once they can go at once.
rt::task<bool> send_one(mpsc::sender<request>& tx, client_state& me, int seq) {
  if (seq % 2 == 0) {
    const asyncband::send_result<request> sent = co_await tx.send(make_request(me, seq));
    co_return sent.ok();
  }
  asyncband::result<mpsc::permit<request>> room = co_await tx.reserve();
  if (!room) co_return false;  // the server is gone: no request built for nothing
  const asyncband::send_result<request> sent = room->send(make_request(me, seq));
  co_return sent.ok();
}

/// Sends the client's requests, hangs up, then collects every reply in order.
rt::task<int> client(client_state& me, mpsc::sender<request> tx_arg, mpsc::unbounded_sender<event> log) {
  {
    // A coroutine's parameters live as long as its frame, which when_all destroys only at the
    // very end: the sender is moved into this block so that it goes when the sending is done,
    // and the server's recv() can end closed.
    mpsc::sender<request> tx = std::move(tx_arg);
    if (me.held) {  // the request try_send handed back: sent as it is, now waiting for room
      const asyncband::send_result<request> sent = co_await tx.send(std::move(*me.held));
      me.held.reset();
      if (!sent) co_return 0;
      ++me.next_seq;
    }
    for (; me.next_seq < kRequestsPerClient; ++me.next_seq) {
      const bool sent = co_await send_one(tx, me, me.next_seq);
      if (!sent) co_return 0;
    }
  }
  for (int seq = 0; seq < kRequestsPerClient; ++seq) {
    const asyncband::result<long> answer = co_await me.replies[static_cast<std::size_t>(seq)].recv();
    if (answer && *answer == answer_to(build_payload(me.id, seq)) && note(log, {false, me.id, seq}))
      ++me.right;
  }
  co_return me.right;
}

/// Answers requests until every client has hung up and the queue is empty.
rt::task<int> server(mpsc::receiver<request>& rx, mpsc::unbounded_sender<event> log) {
  int answered = 0;
  for (;;) {
    asyncband::result<request> next = co_await rx.recv();
    if (!next) break;  // closed: no sender left, nothing queued
    const asyncband::send_result<long> replied = next->reply.send(answer_to(next->payload));
    if (replied && note(log, {true, next->client, next->seq})) ++answered;
  }
  co_return answered;
}

/// Waits for a reply with a stop token; the other task gives up on it.
rt::task<asyncband::wait_status> wait_for_reply(oneshot::receiver<long>& reply, asyncband::stop_token stop) {
  const asyncband::result<long> r = co_await reply.recv(std::move(stop));
  co_return r.status();
}
rt::task<asyncband::wait_status> give_up(asyncband::stop_source& source) {
  source.request_stop();
  co_return asyncband::wait_status::cancelled;
}

rt::task<bool> run(rt::thread_pool& pool) {
  co_await pool.schedule();
  auto requests = mpsc::bounded<request>(kQueueCapacity);
  auto log = mpsc::unbounded<event>();
  std::array<client_state, kClients> clients;
  for (int id = 0; id < kClients; ++id) clients[static_cast<std::size_t>(id)].id = id;

  // 1. The server is not up yet. Client 0 does not want to wait: it try_sends until the queue
  //    is full, and keeps the request handed back. Then it waits for its first reply, but gives
  //    up: the wait ends cancelled (no server yet to answer) and takes nothing.
  client_state& eager = clients[0];
  while (!eager.held) {
    asyncband::send_result<request> r = requests.first.try_send(make_request(eager, eager.next_seq));
    if (r.full()) {
      eager.held.emplace(std::move(r.value()));  // the very request, reply sender included
    } else if (r.ok()) {
      ++eager.next_seq;
    } else {
      co_return false;
    }
  }
  const int accepted = eager.next_seq;
  const int held_seq = eager.held->seq;
  asyncband::stop_source stop;
  const auto waited =
      co_await rt::when_all(wait_for_reply(eager.replies[0], stop.get_token()), give_up(stop));
  const asyncband::wait_status first_wait = std::get<0>(waited);
  std::printf(
      "before the server: %d try_sends accepted, then full (request %d handed back); a stopped "
      "wait for reply 0: %s\n",
      accepted, held_seq, asyncband::to_string(first_wait));

  // 2. The server and the clients. The last client takes main's sender: once every client has
  //    hung up, no sender is left.
  std::vector<rt::task<int>> client_tasks;
  for (int id = 1; id < kClients; ++id)
    client_tasks.push_back(client(clients[static_cast<std::size_t>(id)], requests.first, log.first));
  client_tasks.push_back(client(eager, std::move(requests.first), log.first));
  const auto served = co_await rt::when_all(server(requests.second, std::move(log.first)),
                                            rt::when_all(std::move(client_tasks)));
  const int answered = std::get<0>(served);

  // 3. Drain the log. Every task's frame is gone with its log sender, so after the last event
  //    try_recv reports closed, not empty. The server is one producer of the log: its
  //    events come in the order it received the requests.
  std::array<int, kClients> next_answered{};  // per client: the seq expected next, from the server
  std::array<int, kClients> next_received{};  // ... and from the client itself
  int events = 0;
  int out_of_order = 0;
  asyncband::try_recv_result<event> entry = log.second.try_recv();
  for (; entry.ok(); entry = log.second.try_recv()) {
    const auto c = static_cast<std::size_t>(entry->client);
    int& next = entry->from_server ? next_answered[c] : next_received[c];
    if (entry->seq != next) ++out_of_order;
    next = entry->seq + 1;
    ++events;
  }

  // Client 0's `right` counts reply 0 too: the cancelled wait took nothing, a later recv() did.
  bool ok = accepted == static_cast<int>(kQueueCapacity) && held_seq == accepted &&
            first_wait == asyncband::wait_status::cancelled && answered == kTotal && events == 2 * kTotal &&
            out_of_order == 0 && entry.closed();
  for (std::size_t c = 0; c < clients.size(); ++c) {
    std::printf("client %zu: %d/%d replies right, served in order: %s\n", c, clients[c].right,
                kRequestsPerClient, next_answered[c] == kRequestsPerClient ? "yes" : "no");
    ok = ok && clients[c].right == kRequestsPerClient && next_answered[c] == kRequestsPerClient &&
         next_received[c] == kRequestsPerClient;
  }
  std::printf("%d requests answered through a queue of %zu; %d log events, %d out of order, log %s\n",
              answered, kQueueCapacity, events, out_of_order, entry.closed() ? "closed" : "not drained");
  co_return ok;
}

}  // namespace

int main() {
  rt::thread_pool pool(2);
  return asyncband::block_on(run(pool)) ? 0 : 1;
}
