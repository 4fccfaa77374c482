// SPDX-License-Identifier: Apache-2.0
#include <asyncband/asyncband.hpp>

int main() {
  asyncband::latch l(1);
  l.count_down();
  return l.try_wait() ? 0 : 1;
}
