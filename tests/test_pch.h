#pragma once
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>
