"""What the tests share: real-protocol fakes of the outside world, fixtures data, checks and helpers."""
