// The HDF5 schema table (src/record/schema.hpp) on its own: lookups, and entries a writer and the
// generated doc can rely on. That the files hold exactly what it declares is test_record.cpp's.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "record/schema.hpp"

using namespace divsim;

TEST(Schema, LookupsFindDeclaredNamesAndRefuseOthers) {
  EXPECT_EQ(schema::dataset("/train/loss").id, schema::DatasetId::train_loss);
  EXPECT_EQ(schema::dataset("/init/layer1.0.conv1/weight").id, schema::DatasetId::init);
  EXPECT_EQ(schema::root_attribute("slurm_job_id").id, schema::AttributeId::slurm_job_id);
  EXPECT_THROW(schema::dataset("/train/nothing"), std::logic_error);
  EXPECT_THROW(schema::dataset("/init/"), std::logic_error);  // a pattern stands for a name, not for none
  EXPECT_THROW(schema::dataset("/train"), std::logic_error);  // groups are no datasets
  EXPECT_THROW(schema::root_attribute("no_such_attribute"), std::logic_error);
  EXPECT_THROW(schema::root_attribute("dims"), std::logic_error);  // a dataset attribute
}

TEST(Schema, EntriesAreUniqueOneLineAndTheirAxesMatchTheirShapes) {
  std::set<std::string_view> paths, names;
  for (const auto& d : schema::datasets()) {
    EXPECT_EQ(&schema::dataset(d.id), &d) << d.path;
    EXPECT_TRUE(paths.insert(d.path).second) << "duplicate " << d.path;
    const std::string_view concrete = d.id == schema::DatasetId::init ? std::string_view("/init/fc1/weight") : d.path;
    EXPECT_EQ(&schema::dataset(concrete), &d) << d.path;
    EXPECT_FALSE(d.written.empty()) << d.path;
    EXPECT_FALSE(d.description.empty()) << d.path;
    EXPECT_EQ(d.description.find('\n'), std::string_view::npos) << d.path;  // one table row of the doc
    if (d.shape.starts_with("[")) {  // [S,W] has as many axes as step,rank
      const auto axes = d.axes();
      EXPECT_EQ(static_cast<std::size_t>(std::count(d.shape.begin(), d.shape.end(), ',')) + 1, axes.size()) << d.path;
      EXPECT_EQ(d.per_rank(), axes.size() > 1 && axes[1] == "rank") << d.path;
    }
  }
  EXPECT_TRUE(schema::dataset("/train/samples").per_rank());
  EXPECT_FALSE(schema::dataset("/train/global_loss").per_rank());
  EXPECT_EQ(schema::dataset("/layers/forward").axes(),
            (std::vector<std::string_view>{"step", "rank", "layer", "stat"}));

  for (const auto& a : schema::attributes()) {
    EXPECT_EQ(&schema::attribute(a.id), &a) << a.name;
    EXPECT_TRUE(names.insert(a.name).second) << "duplicate " << a.name;
    if (a.root()) {
      EXPECT_EQ(&schema::root_attribute(a.name), &a) << a.name;
    }
    EXPECT_FALSE(a.description.empty()) << a.name;
    EXPECT_EQ(a.description.find('\n'), std::string_view::npos) << a.name;
  }
}
