from trajsynth.cli import main

main()
