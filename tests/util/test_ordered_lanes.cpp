// OrderedLanes: items come back in index order whatever the lane and stage counts, the stages of a lane really
// run at once (a pipeline, not a loop), a stage's exception reaches the consumer without hanging any thread, stop()
// ends a run early, and the busy clocks count the time spent inside the stage function.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "ordered_lanes.h"

using dflash::util::OrderedLanes;

namespace {

struct Item {
  int64_t value = -1;
  std::vector<int> lanes;  // which lane ran each stage
};

}  // namespace

TEST(OrderedLanes, ItemsComeBackInIndexOrderFromLaneIndexModR) {
  for (int lanes : {1, 2, 3})
    for (int stages : {1, 2, 3}) {
      OrderedLanes<Item> run(lanes, stages, 11, 2, [&](int lane, int stage, int64_t index, Item& it) {
        if (stage == 0) it.value = index * 10;
        else it.value += 1;
        it.lanes.push_back(lane);
      });
      for (int64_t i = 0; i < 11; ++i) {
        auto it = run.next();
        ASSERT_TRUE(it) << i;
        EXPECT_EQ(it->value, i * 10 + stages - 1);
        EXPECT_EQ(it->lanes, std::vector<int>(size_t(stages), int(i % lanes)));
      }
      EXPECT_FALSE(run.next());
    }
}

// Stage 1 of item 0 waits until stage 0 has started item 1: a lane that ran its stages one item at a time would
// never get there (the wait times out and the test fails instead of hanging).
TEST(OrderedLanes, StagesOfALaneWorkAtOnce) {
  std::mutex m;
  std::condition_variable cv;
  bool second_started = false, timed_out = false;
  OrderedLanes<Item> run(1, 2, 2, 1, [&](int, int stage, int64_t index, Item& it) {
    std::unique_lock<std::mutex> l(m);
    if (stage == 0 && index == 1) {
      second_started = true;
      cv.notify_all();
    }
    if (stage == 1 && index == 0)
      timed_out = !cv.wait_for(l, std::chrono::seconds(20), [&] { return second_started; });
    it.value = index;
  });
  EXPECT_EQ(run.next()->value, 0);
  EXPECT_EQ(run.next()->value, 1);
  EXPECT_FALSE(timed_out);
}

TEST(OrderedLanes, StageErrorReachesTheConsumer) {
  for (int failing_stage : {0, 1}) {
    OrderedLanes<Item> run(2, 2, 100, 1, [&](int, int stage, int64_t index, Item&) {
      if (index == 3 && stage == failing_stage) throw std::runtime_error("item 3 broke");
    });
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(run.next());
    try {
      run.next();
      ADD_FAILURE() << "no error";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "item 3 broke");
    }
  }  // the destructor joins every thread (the test would hang otherwise)
}

TEST(OrderedLanes, StopEndsEarly) {
  OrderedLanes<Item> run(2, 2, 1000000, 1, [&](int, int, int64_t index, Item& it) { it.value = index; });
  EXPECT_EQ(run.next()->value, 0);
  run.stop();
  EXPECT_FALSE(run.next());
}

TEST(OrderedLanes, BusyClockCountsTimeInsideTheStage) {
  OrderedLanes<Item> run(1, 2, 3, 1, [&](int, int stage, int64_t, Item&) {
    if (stage == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
  });
  while (run.next()) {
  }
  EXPECT_GE(run.busy_seconds(0, 1), 0.09);
  EXPECT_LT(run.busy_seconds(0, 0), run.busy_seconds(0, 1));
}
