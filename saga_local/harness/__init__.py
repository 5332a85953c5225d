"""The harness: runs orders through a stack, injects faults and judges what came out."""
