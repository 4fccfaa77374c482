// SPDX-License-Identifier: Apache-2.0
// bench/queue_peers.hpp: the bounded queues of the C++ ecosystem, adapted for the plain-thread
// channel cases (bench_channels, bench_mpmc): Asio's concurrent_channel, moodycamel's
// BlockingConcurrentQueue (and, as a reference, the same made bounded with its own semaphore),
// tbb::concurrent_bounded_queue, and a textbook deque + mutex + two
// condition variables. Each adapter is `Channel(capacity)`, `Channel::producer` (one per
// producer thread, kept for the whole run) with send(T&&) that blocks while the queue is full,
// and `Channel::consumer` (one per consumer thread) with recv() that blocks while it is empty.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <blockingconcurrentqueue.h>
#include <oneapi/tbb/concurrent_queue.h>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>

namespace asyncband_bench::peers {

using error_code = boost::system::error_code;

/// A state the benchmark cannot recover from (a send refused by a channel nobody closed): a
/// producer thread has no way to fail the case without leaving the consumer waiting forever.
[[noreturn]] inline void impossible(const char* what) {
  std::fprintf(stderr, "bench: %s\n", what);
  std::abort();
}

// ---------------------------------------------------------------------------------------------
// The std baseline: a bounded deque under a mutex, the textbook way.

template <class T>
class cv_bounded_queue {
 public:
  explicit cv_bounded_queue(std::size_t capacity) : capacity_(capacity) {}

  void push(T&& value) {
    std::unique_lock lock(mutex_);
    not_full_.wait(lock, [this] { return items_.size() < capacity_; });
    items_.push_back(std::move(value));
    lock.unlock();
    not_empty_.notify_one();
  }
  T pop() {
    std::unique_lock lock(mutex_);
    not_empty_.wait(lock, [this] { return !items_.empty(); });
    T value = std::move(items_.front());
    items_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return value;
  }
  bool try_push(T& value) {
    {
      const std::lock_guard lock(mutex_);
      if (items_.size() == capacity_) return false;
      items_.push_back(std::move(value));
    }
    not_empty_.notify_one();
    return true;
  }
  bool try_pop(T& out) {
    {
      const std::lock_guard lock(mutex_);
      if (items_.empty()) return false;
      out = std::move(items_.front());
      items_.pop_front();
    }
    not_full_.notify_one();
    return true;
  }

 private:
  const std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<T> items_;
};

// ---------------------------------------------------------------------------------------------
// Plain-thread adapters: Channel(capacity); Channel::producer (movable, one per producer thread,
// kept for the whole run) with send(T&&) that blocks while the channel is full; Channel::consumer
// with recv() that blocks while it is empty.

template <class T>
using asio_channel = boost::asio::experimental::concurrent_channel<void(error_code, T)>;

/// Try first; when that fails, an async operation completed on this thread's own io_context.
template <class T>
class asio_threads {
 public:
  explicit asio_threads(std::size_t capacity) : channel_(home_.get_executor(), capacity) {}

  class producer {
   public:
    explicit producer(asio_channel<T>& channel)
        : channel_(&channel), context_(std::make_unique<boost::asio::io_context>(1)) {}
    void send(T&& value) {
      if (channel_->try_send(error_code{}, std::move(value))) return;  // leaves value alone if it fails
      bool done = false;
      error_code error;
      channel_->async_send(error_code{}, std::move(value),
                           boost::asio::bind_executor(*context_, [&done, &error](error_code e) {
                             error = e;
                             done = true;
                           }));
      context_->restart();
      while (!done) context_->run_one();
      if (error) impossible("asio: async_send failed");
    }

   private:
    asio_channel<T>* channel_;
    std::unique_ptr<boost::asio::io_context> context_;
  };
  producer make_producer() { return producer(channel_); }

  class consumer {
   public:
    explicit consumer(asio_channel<T>& channel)
        : channel_(&channel), context_(std::make_unique<boost::asio::io_context>(1)) {}
    T recv() {
      std::optional<T> out;
      error_code error;
      auto take = [&out, &error](error_code e, T value) {
        error = e;
        out.emplace(std::move(value));
      };
      if (!channel_->try_receive(take)) {
        channel_->async_receive(boost::asio::bind_executor(*context_, take));
        context_->restart();
        while (!out) context_->run_one();
      }
      if (error) impossible("asio: receive failed");
      return std::move(*out);
    }

   private:
    asio_channel<T>* channel_;
    std::unique_ptr<boost::asio::io_context> context_;  // movable, for a vector of consumers
  };
  consumer make_consumer() { return consumer(channel_); }

 private:
  boost::asio::io_context home_{1};  // the channel's executor; never run (handlers bring their own)
  asio_channel<T> channel_;
};

/// Unbounded: `capacity` is only the initial allocation.
template <class T>
class moodycamel_threads {
 public:
  explicit moodycamel_threads(std::size_t capacity) : queue_(capacity) {}

  class producer {
   public:
    explicit producer(moodycamel::BlockingConcurrentQueue<T>& queue) : queue_(&queue), token_(queue) {}
    void send(T&& value) {
      if (!queue_->enqueue(token_, std::move(value))) impossible("moodycamel: enqueue failed");
    }

   private:
    moodycamel::BlockingConcurrentQueue<T>* queue_;
    moodycamel::ProducerToken token_;
  };
  producer make_producer() { return producer(queue_); }

  class consumer {
   public:
    explicit consumer(moodycamel::BlockingConcurrentQueue<T>& queue) : queue_(&queue), token_(queue) {}
    T recv() {
      T value{};
      queue_->wait_dequeue(token_, value);
      return value;
    }

   private:
    moodycamel::BlockingConcurrentQueue<T>* queue_;
    moodycamel::ConsumerToken token_;
  };
  consumer make_consumer() { return consumer(queue_); }

 private:
  moodycamel::BlockingConcurrentQueue<T> queue_;
};

/// moodycamel's queue made bounded with moodycamel's own semaphore of free slots: a producer
/// takes a slot before it enqueues, a consumer gives one back after it dequeues. Not a peer of
/// the targets (no library ships it): the floor of a bounded queue built from the fastest
/// unbounded one, to tell what bounding itself costs at a small capacity.
template <class T>
class moodycamel_capped_threads {
 public:
  explicit moodycamel_capped_threads(std::size_t capacity)
      : queue_(capacity), free_(static_cast<moodycamel::LightweightSemaphore::ssize_t>(capacity)) {}

  class producer {
   public:
    explicit producer(moodycamel_capped_threads& q) : q_(&q), token_(q.queue_) {}
    void send(T&& value) {
      while (!q_->free_.wait()) {
      }
      if (!q_->queue_.enqueue(token_, std::move(value))) impossible("moodycamel: enqueue failed");
    }

   private:
    moodycamel_capped_threads* q_;
    moodycamel::ProducerToken token_;
  };
  producer make_producer() { return producer(*this); }

  class consumer {
   public:
    explicit consumer(moodycamel_capped_threads& q) : q_(&q), token_(q.queue_) {}
    T recv() {
      T value{};
      q_->queue_.wait_dequeue(token_, value);
      q_->free_.signal();
      return value;
    }

   private:
    moodycamel_capped_threads* q_;
    moodycamel::ConsumerToken token_;
  };
  consumer make_consumer() { return consumer(*this); }

 private:
  moodycamel::BlockingConcurrentQueue<T> queue_;
  moodycamel::LightweightSemaphore free_;
};

template <class T>
class tbb_threads {
 public:
  explicit tbb_threads(std::size_t capacity) { queue_.set_capacity(static_cast<std::ptrdiff_t>(capacity)); }

  class producer {
   public:
    explicit producer(tbb::concurrent_bounded_queue<T>& queue) : queue_(&queue) {}
    void send(T&& value) { queue_->push(std::move(value)); }

   private:
    tbb::concurrent_bounded_queue<T>* queue_;
  };
  producer make_producer() { return producer(queue_); }

  class consumer {
   public:
    explicit consumer(tbb::concurrent_bounded_queue<T>& queue) : queue_(&queue) {}
    T recv() {
      T value{};
      queue_->pop(value);
      return value;
    }

   private:
    tbb::concurrent_bounded_queue<T>* queue_;
  };
  consumer make_consumer() { return consumer(queue_); }

 private:
  tbb::concurrent_bounded_queue<T> queue_;
};

template <class T>
class std_threads {
 public:
  explicit std_threads(std::size_t capacity) : queue_(capacity) {}

  class producer {
   public:
    explicit producer(cv_bounded_queue<T>& queue) : queue_(&queue) {}
    void send(T&& value) { queue_->push(std::move(value)); }

   private:
    cv_bounded_queue<T>* queue_;
  };
  producer make_producer() { return producer(queue_); }

  class consumer {
   public:
    explicit consumer(cv_bounded_queue<T>& queue) : queue_(&queue) {}
    T recv() { return queue_->pop(); }

   private:
    cv_bounded_queue<T>* queue_;
  };
  consumer make_consumer() { return consumer(queue_); }

 private:
  cv_bounded_queue<T> queue_;
};

}  // namespace asyncband_bench::peers
