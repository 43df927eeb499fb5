// Random layouts shared by the tasks: points in the arm's comfortable annulus, joint angles.
#pragma once
#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <utility>

namespace nexus::sim {

using Rng = std::mt19937_64;
using Point = std::pair<double, double>;

inline double uniform(Rng& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

// Reachable without the arm folding onto itself or stretching straight (links 0.13 + 0.12).
inline Point in_annulus(Rng& rng, double r_min, double r_max) {
  const double r = uniform(rng, r_min, r_max), a = uniform(rng, -std::numbers::pi, std::numbers::pi);
  return {r * std::cos(a), r * std::sin(a)};
}

// The fingertip for joint angles (shoulder, elbow): forward kinematics of the MJCF's links.
inline Point tip_at(double shoulder, double elbow) {
  return {0.13 * std::cos(shoulder) + 0.12 * std::cos(shoulder + elbow),
          0.13 * std::sin(shoulder) + 0.12 * std::sin(shoulder + elbow)};
}

inline double distance(Point a, Point b) { return std::hypot(a.first - b.first, a.second - b.second); }
inline double norm(Point a) { return std::hypot(a.first, a.second); }

// Distance from p to the segment [a, b].
inline double segment_distance(Point p, Point a, Point b) {
  const double sx = b.first - a.first, sy = b.second - a.second, len2 = sx * sx + sy * sy;
  const double u =
      len2 > 0 ? std::clamp(((p.first - a.first) * sx + (p.second - a.second) * sy) / len2, 0.0, 1.0) : 0.0;
  return distance(p, {a.first + u * sx, a.second + u * sy});
}

// Experts' path planning: the fingertip cannot pass within about 3.3 cm of the shoulder (the
// elbow's range), so a target more than 0.6 rad round the shoulder is approached along an arc
// (radius at least 10 cm), 0.6 rad at a time; within 0.6 rad the straight line clears the
// shoulder. Deciding by angle alone keeps the choice stable from step to step. Returns the next
// point to head for.
inline Point around_shoulder(Point from, Point to) {
  const double a_from = std::atan2(from.second, from.first), a_to = std::atan2(to.second, to.first);
  const double turn = std::remainder(a_to - a_from, 2 * std::numbers::pi);
  if (std::abs(turn) <= 0.6) return to;
  const double a = a_from + (turn > 0 ? 0.6 : -0.6), r = std::max(0.1, norm(from));
  return {r * std::cos(a), r * std::sin(a)};
}

// The reach expert's controller toward `goal` (by way of around_shoulder): full speed from 5 cm
// out, then proportional (a smooth function of the offset is easier to imitate than a bang-bang
// one, and still arrives in a few steps). Shared by the expert and the scripted baselines.
inline std::pair<float, float> steer_toward(Point tip, Point goal) {
  const auto [tx, ty] = around_shoulder(tip, goal);
  const double gain = 1.0 / 0.05;
  return {static_cast<float>(std::clamp((tx - tip.first) * gain, -1.0, 1.0)),
          static_cast<float>(std::clamp((ty - tip.second) * gain, -1.0, 1.0))};
}

}  // namespace nexus::sim
