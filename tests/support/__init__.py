"""What the tests share: fakes, contracts and numeric helpers that more than one test folder uses."""
