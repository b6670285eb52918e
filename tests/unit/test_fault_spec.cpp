// Fault entry syntax (NAME[:key=value,...]), the shared keys, RankSet semantics and every syntax error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/config_error.hpp"
#include "faults/fault_spec.hpp"

using namespace divsim;

namespace {

// Parses `spec`, which must fail, and checks the error names the fault, the spec and the problem.
void expect_fault_error(const std::string& spec, const std::string& fragment) {
  try {
    parse_fault_spec(spec);
    ADD_FAILURE() << "'" << spec << "' parsed, expected an error mentioning '" << fragment << "'";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "fault") << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("'" + spec + "'"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << "'" << spec << "' -> " << what;
  }
}

}  // namespace

TEST(FaultSpec, NameAloneHasDefaults) {
  const FaultSpec f = parse_fault_spec("skip_rank");
  EXPECT_EQ(f.text, "skip_rank");
  EXPECT_EQ(f.name, "skip_rank");
  EXPECT_TRUE(f.ranks.all);
  EXPECT_EQ(f.start, 0);
  EXPECT_EQ(f.stop, -1);
  EXPECT_EQ(f.every, 1);
  EXPECT_EQ(f.prob, 1.0);
  EXPECT_TRUE(f.params.empty());
}

TEST(FaultSpec, CommonAndSpecificKeys) {
  const std::string text = "bitflip:ranks=1+3-5,start=10,stop=20,every=2,prob=0.25,bit=30,tensor=fc1.weight";
  const FaultSpec f = parse_fault_spec(text);
  EXPECT_EQ(f.text, text);
  EXPECT_EQ(f.name, "bitflip");
  EXPECT_FALSE(f.ranks.all);
  EXPECT_EQ(f.ranks.runs, (std::vector<RankSet::Run>{{1, 1}, {3, 5}}));
  EXPECT_EQ(f.start, 10);
  EXPECT_EQ(f.stop, 20);
  EXPECT_EQ(f.every, 2);
  EXPECT_EQ(f.prob, 0.25);
  EXPECT_EQ(f.params.size(), 2u);  // the common keys are not repeated in params
  EXPECT_EQ(f.param("bit", "0"), "30");
  EXPECT_EQ(f.param("tensor", ""), "fc1.weight");
  EXPECT_EQ(f.param("absent", "fallback"), "fallback");
  EXPECT_EQ(f.param_int("bit", 0), 30);
  EXPECT_EQ(f.param_int("absent", -7), -7);
  EXPECT_EQ(f.param_double("bit", 0.0), 30.0);
  EXPECT_EQ(f.param_double("absent", 0.5), 0.5);
}

TEST(FaultSpec, BlanksAroundItemsAreIgnored) {
  const FaultSpec f = parse_fault_spec("loss_skew: ranks = 2 , margin = 0.1");
  EXPECT_EQ(f.name, "loss_skew");
  EXPECT_EQ(f.ranks.runs, (std::vector<RankSet::Run>{{2, 2}}));
  EXPECT_EQ(f.param_double("margin", 0.0), 0.1);
}

TEST(FaultSpec, ParamErrorsNameTheSpecAndKey) {
  const FaultSpec f = parse_fault_spec("bitflip:bit=high,scale=1.5");
  try {
    f.param_int("bit", 0);
    ADD_FAILURE() << "non-numeric param accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "fault");
    EXPECT_NE(std::string(e.what()).find("'bitflip:bit=high,scale=1.5'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bit: 'high' is not an integer"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.param_int("scale", 0), ConfigError);  // a fraction is not an integer
  EXPECT_THROW(f.param_double("bit", 0.0), ConfigError);
}

TEST(FaultSpec, InWindowFollowsStartStopEvery) {
  const FaultSpec f = parse_fault_spec("x:start=10,stop=20,every=3");
  std::vector<std::int64_t> active;
  for (std::int64_t s = 0; s < 30; ++s)
    if (f.in_window(s)) active.push_back(s);
  EXPECT_EQ(active, (std::vector<std::int64_t>{10, 13, 16, 19}));

  const FaultSpec open_ended = parse_fault_spec("x:start=5");
  EXPECT_FALSE(open_ended.in_window(4));
  EXPECT_TRUE(open_ended.in_window(5));
  EXPECT_TRUE(open_ended.in_window(1000000));
}

TEST(FaultSpec, SyntaxErrors) {
  expect_fault_error("", "empty fault name");
  expect_fault_error(":ranks=1", "empty fault name");
  expect_fault_error("BitFlip", "may contain only a-z, 0-9 and _");
  expect_fault_error("bit-flip", "may contain only");
  expect_fault_error("x:", "malformed entry ''");
  expect_fault_error("x:ranks", "malformed entry 'ranks'");
  expect_fault_error("x:=1", "malformed entry '=1'");
  expect_fault_error("x:ranks=", "malformed entry 'ranks='");
  expect_fault_error("x:start=1,", "malformed entry ''");
  expect_fault_error("x:Key=1", "malformed entry 'Key=1'");
  expect_fault_error("x:start=1,start=2", "key 'start' given twice");
  expect_fault_error("x:bit=1,bit=2", "key 'bit' given twice");
}

TEST(FaultSpec, RankErrors) {
  expect_fault_error("x:ranks=a", "'a' is not a rank");
  expect_fault_error("x:ranks=1.5", "'1.5' is not a rank");
  expect_fault_error("x:ranks=-1", "negative rank '-1'");
  expect_fault_error("x:ranks=2--1", "negative rank in '2--1'");
  expect_fault_error("x:ranks=5-3", "range '5-3' ends before it starts");
  expect_fault_error("x:ranks=1++2", "empty item");
  expect_fault_error("x:ranks=3-", "'3-' is not a rank");
  expect_fault_error("x:ranks=99999999999", "exceeds");
}

TEST(FaultSpec, WindowAndProbabilityErrors) {
  expect_fault_error("x:start=-1", "start must be >= 0, got -1");
  expect_fault_error("x:start=5,stop=5", "stop (exclusive) must be > start (5), got 5");
  expect_fault_error("x:stop=-1", "stop (exclusive) must be > start (0), got -1");
  expect_fault_error("x:every=0", "every must be >= 1, got 0");
  expect_fault_error("x:prob=0", "prob must be in (0,1], got 0");
  expect_fault_error("x:prob=1.5", "prob must be in (0,1], got 1.5");
  expect_fault_error("x:prob=-0.1", "prob must be in (0,1]");
  expect_fault_error("x:prob=nan", "must be finite");
  expect_fault_error("x:start=abc", "start: 'abc' is not an integer");
  expect_fault_error("x:every=2.5", "every: '2.5' is not an integer");
  expect_fault_error("x:prob=half", "prob: 'half' is not a number");
  // Boundaries that are allowed.
  EXPECT_EQ(parse_fault_spec("x:prob=1").prob, 1.0);
  EXPECT_EQ(parse_fault_spec("x:start=3,stop=4").stop, 4);
}

TEST(RankSet, DefaultIsAll) {
  const RankSet all;
  EXPECT_TRUE(all.contains(0));
  EXPECT_TRUE(all.contains(12345));
  EXPECT_EQ(all.max_rank(), -1);
  EXPECT_EQ(all.text(), "all");
  EXPECT_TRUE(parse_fault_spec("x:ranks=all").ranks.all);
}

TEST(RankSet, ListsRangesAndCanonicalText) {
  const RankSet r = parse_fault_spec("x:ranks=7+2-4+3+0").ranks;
  EXPECT_EQ(r.runs, (std::vector<RankSet::Run>{{0, 0}, {2, 4}, {7, 7}}));  // sorted, merged
  EXPECT_EQ(r.count(), 5);
  for (int rank = 0; rank < 10; ++rank)
    EXPECT_EQ(r.contains(rank), rank == 0 || (rank >= 2 && rank <= 4) || rank == 7) << rank;
  EXPECT_EQ(r.max_rank(), 7);
  EXPECT_EQ(r.text(), "0+2-4+7");
  EXPECT_EQ(parse_fault_spec("x:ranks=5").ranks.text(), "5");
  EXPECT_EQ(parse_fault_spec("x:ranks=3+1+2").ranks.text(), "1-3");
  EXPECT_EQ(parse_fault_spec("x:ranks=0+2").ranks.text(), "0+2");
  EXPECT_EQ(parse_fault_spec("x:ranks=4-4").ranks.runs, (std::vector<RankSet::Run>{{4, 4}}));
  EXPECT_EQ(parse_fault_spec("x:ranks=5-9+0-3+4").ranks.text(), "0-9");  // adjacent and overlapping runs merge
  EXPECT_EQ(parse_fault_spec("x:ranks=2-6+3-4").ranks.text(), "2-6");
  // The canonical text parses back to the same set.
  EXPECT_EQ(parse_fault_spec("x:ranks=" + r.text()).ranks.runs, r.runs);
}

// A spec of a few bytes can name a million ranks several times over; parsing must not expand them.
TEST(RankSet, WideRangesStayRuns) {
  const RankSet r = parse_fault_spec("x:ranks=0-1048575+0-1048575+0-1048575+0-1048575+5-1048575").ranks;
  EXPECT_EQ(r.runs.size(), 1u);
  EXPECT_EQ(r.count(), 1048576);
  EXPECT_TRUE(r.contains(1048575));
  EXPECT_FALSE(r.contains(1048576));
}

TEST(RankSet, CheckAgainstWorldSize) {
  EXPECT_NO_THROW(check_fault_ranks(parse_fault_spec("x"), 1));
  EXPECT_NO_THROW(check_fault_ranks(parse_fault_spec("x:ranks=1+3"), 4));
  try {
    check_fault_ranks(parse_fault_spec("x:ranks=1+3"), 3);
    ADD_FAILURE() << "rank 3 accepted in a world of 3";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "fault");
    EXPECT_NE(std::string(e.what()).find("names rank 3 but the world has 3 ranks (0..2)"), std::string::npos)
        << e.what();
  }
}
