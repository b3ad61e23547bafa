// The umbrella header compiles on its own, and the version it reports is the
// project's.

#include <gtest/gtest.h>

#include <string>

#include "reprise/reprise.hpp"

TEST(Version, IsTheProjectsVersion) {
  EXPECT_STREQ(reprise::kVersion, REPRISE_EXPECTED_VERSION);
  EXPECT_EQ(std::to_string(REPRISE_VERSION_MAJOR) + "." + std::to_string(REPRISE_VERSION_MINOR) + "." +
                std::to_string(REPRISE_VERSION_PATCH),
            std::string(reprise::kVersion));
}
